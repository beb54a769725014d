"""What every framework adapter shares: Winnow's rerankers and filters over a caller's list, and a
whole method as a retriever, with arguments checked once and results in one framework-neutral shape.

A :class:`Winnower` runs one *stage* over a query and the texts another framework retrieved:

==============  ==================================================================================
stage           what it does (and where it comes from)
==============  ==================================================================================
pointwise       RankRAG's P("True") per document (§4.3, App. D.1): rerank
graded          RRR's relevance grade 1-5, expected over the next-token probabilities (App. A.2): rerank
listwise        RankGPT's sliding-window permutation (window, step): rerank
embedding       all-MiniLM-L6-v2 cosine, no LLM: rerank
judge_filter    MAIN-RAG's Agent-1 answers, Agent-2's judge s = log P("Yes") - log P("No"), and the
                adaptive judge bar τ = mean(s) - n·std(s) ("Adaptive Judge Bar"): filter
graded_filter   RRR's σ, keeping σ > τ (Algorithm 1 line 6; τ = 1, §4(D)): filter, kept ranked by E[σ]
==============  ==================================================================================

The four rerankers are :func:`winnow.rerank.rerank` itself; the two filters are the stages MAIN-RAG
and RRR build (:func:`~winnow.methods.mainrag.judge_filter_stages`,
:func:`~winnow.methods.rrr.relevance_filter_stages`). :meth:`Winnower.run` returns a
:class:`Winnowed`: the kept items (their input index, the stage's score, a 0-1 relevance, rank and
every stage's score) and the dropped ones, each with the reason it was dropped. ``top_k`` cuts any
stage's kept list; what it cuts is dropped with that reason too, so nothing disappears unreported.

A :class:`MethodRunner` is a whole method (RankRAG, MAIN-RAG, RRR, …) over a Winnow index: the
passages it keeps for a query (its recipe up to, not including, the answer) or its answer.

Bad arguments raise :class:`ArgumentError`, a ``ValueError`` naming the argument, which is what the
frameworks raise for theirs (pydantic wraps it in a ``ValidationError`` naming the field).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import WinnowError
from ..llm.client import LLM
from ..records import Answer, Candidate, Passage, Query, Trace, Usage
from ..rerank import RERANK_METHODS, relevance_score, rerank
from ..settings import LayeredSettingError, SettingsLayer, resolve_layers
from ..stages.contract import QuestionState, run_stages
from ..text import text_problem

#: The stages an adapter can run, by name, with what each does.
STAGES: dict[str, str] = {
    **RERANK_METHODS,
    "judge_filter": 'MAIN-RAG: Agent-1 answers per document, judge log P("Yes") - log P("No"), keep s ≥ τ = '
                    "mean - n·std (judge_n)",
    "graded_filter": "RRR: relevance grade σ 1-5, keep σ > τ (tau), ranked by expected grade",
}
FILTERS = ("judge_filter", "graded_filter")
#: The model loaded when an LLM stage is given neither ``llm`` nor ``model`` (the CLI's default).
DEFAULT_MODEL = "qwen2.5-coder-1.5b"


class ArgumentError(WinnowError, ValueError):
    """An argument of an adapter with a bad value; ``argument`` names it. A ``ValueError``, as the
    frameworks raise for bad arguments (and pydantic turns into a ``ValidationError``)."""

    def __init__(self, argument: str, message: str, hint: str = "") -> None:
        super().__init__(f"{argument}: {message}", hint)
        self.argument = argument


def check_stage(stage: object) -> str:
    if not isinstance(stage, str) or stage not in STAGES:
        raise ArgumentError("stage", f"unknown Winnow stage {stage!r}", f"choose one of: {', '.join(STAGES)}")
    return stage


def check_top_k(top_k: object, argument: str = "top_k") -> int | None:
    if top_k is None:
        return None
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        raise ArgumentError(argument, f"must be a whole number of at least 1 or None (got {top_k!r})")
    if top_k < 1:
        raise ArgumentError(argument, f"must be at least 1 (got {top_k})", "leave it out to keep every item")
    return top_k


def check_query(query: object, argument: str = "query") -> str:
    if not isinstance(query, str):
        raise ArgumentError(argument, f"must be a string (got {type(query).__name__})")
    problem = text_problem(query)
    if problem:
        raise ArgumentError(argument, f"the query {problem}", "give the question to rank the documents for")
    return query


def check_number(value: object, argument: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ArgumentError(argument, f"must be a finite number (got {value!r})")
    return float(value)


def check_llm(llm: object, argument: str = "llm") -> LLM | None:
    if llm is not None and not isinstance(llm, LLM):
        raise ArgumentError(argument, f"must be a winnow LLM (got {type(llm).__name__})",
                            "load one with winnow.load_llm(model, backend=..., base_url=...), or pass model=")
    return llm


def _listwise_window(window: object, step: object) -> tuple[int, int]:
    """The listwise window and step, checked by the rerank settings' own rule (one rule for the CLI,
    HTTP and the adapters), a refusal naming the argument."""
    from ..rerank import RerankSettings

    layer = SettingsLayer("arguments", {"method": "listwise", "window": window, "step": step})
    try:
        settings = resolve_layers(RerankSettings, [layer], owner="the listwise reranker").settings
    except LayeredSettingError as error:
        raise ArgumentError(error.field, error.message, error.hint) from None
    return settings.window, settings.step


@dataclass(frozen=True)
class Kept:
    """An item the stage kept. ``index`` is its position in the caller's list (None for a method's
    passages, which the method retrieved itself); ``score`` the stage's own score; ``relevance`` the
    same on a 0-1 scale (:func:`item_relevance`); ``rank`` 1-based in the output; ``stage_scores``
    every Winnow stage's score for it, by stage name."""

    index: int | None
    id: str
    text: str
    score: float
    relevance: float
    rank: int
    stage_scores: dict[str, float]
    title: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    note: str = ""  # what the stage said about keeping it (the adaptive bar's fallback, say)


@dataclass(frozen=True)
class Dropped:
    """An item the stage dropped, with the reason and the stage's score for it."""

    index: int
    id: str
    text: str
    score: float
    stage_scores: dict[str, float]
    reason: str
    title: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Winnowed:
    """What a stage made of one list: kept items best first, dropped ones in input order, the trace."""

    query: str
    stage: str
    kept: list[Kept]
    dropped: list[Dropped]
    trace: Trace

    @property
    def usage(self) -> Usage:
        return self.trace.usage


def item_relevance(stage: str, score: float, rank: int, count: int) -> float:
    """The stage's score on a 0-1 scale: the hosted-rerank convention of :func:`winnow.rerank.relevance_score`
    for the rerankers (the embedding cosine as it is); for the judge, P("Yes") over {Yes, No}, i.e. the
    logistic of its log-odds s; for the graded filter, the graded reranker's (E[σ] - 1) / 4."""
    if stage == "judge_filter":
        return 1.0 / (1.0 + math.exp(-score)) if score > -700 else 0.0
    return relevance_score("graded" if stage == "graded_filter" else stage, score, rank, count)


def winnow_metadata(item: Kept, stage: str) -> dict[str, Any]:
    """The keys every adapter adds to a kept document's metadata."""
    return {"winnow_stage": stage, "winnow_score": item.score, "winnow_relevance": item.relevance,
            "winnow_rank": item.rank, "winnow_stage_scores": dict(item.stage_scores)}


def dropped_metadata(item: Dropped, stage: str) -> dict[str, Any]:
    """The keys every adapter adds to a dropped document's metadata (the reason above all)."""
    return {"winnow_stage": stage, "winnow_score": item.score, "winnow_stage_scores": dict(item.stage_scores),
            "winnow_dropped": item.reason}


def stage_scores(candidate: Candidate) -> dict[str, float]:
    """Every Winnow stage's score for ``candidate`` (the caller's own order, "input", left out)."""
    return {s.stage: s.score for s in candidate.scores if s.stage != "input"}


class Winnower:
    """One Winnow stage (see :data:`STAGES`) over lists a caller hands in.

    The LLM stages use ``llm`` (a :class:`winnow.llm.LLM`, any backend), or load ``model`` through
    :func:`winnow.load_llm` with ``backend`` ("llama.cpp" in-process, "openai" for an
    OpenAI-compatible server at ``base_url``); a model loaded here is closed by :meth:`close`.
    ``judge_llm`` gives MAIN-RAG's judge its own model. ``embedding`` uses ``embedder`` or loads
    all-MiniLM-L6-v2 (the ``dense`` extra). ``top_k`` keeps the best k of what the stage keeps;
    ``judge_n`` is the adaptive bar's n, ``max_document_answer_tokens`` Agent-1's answer budget,
    ``tau`` the graded filter's τ, ``window``/``step`` the listwise window.
    """

    def __init__(self, stage: str = "pointwise", *, llm: LLM | None = None, model: str | None = None,
                 backend: str = "llama.cpp", base_url: str | list[str] = "", api_key: str = "",
                 judge_llm: LLM | None = None, embedder: Any = None, top_k: int | None = None,
                 judge_n: float = 0.0, tau: float = 1.0, window: int = 10, step: int = 5,
                 max_document_answer_tokens: int = 32, cache: bool | str | Path = True, lazy: bool = False) -> None:
        self.stage = check_stage(stage)
        self.top_k = check_top_k(top_k)
        self.judge_n = check_number(judge_n, "judge_n")
        self.tau = check_number(tau, "tau")
        self.window, self.step = _listwise_window(window, step)
        self.max_document_answer_tokens = _at_least(max_document_answer_tokens, 1, "max_document_answer_tokens")
        self.llm = check_llm(llm)
        self.judge_llm = check_llm(judge_llm, "judge_llm")
        if embedder is not None and not callable(getattr(embedder, "embed", None)):
            raise ArgumentError("embedder", f"must be a winnow Embedder (got {type(embedder).__name__})",
                                "winnow.index.load_embedder(), or leave it out to load all-MiniLM-L6-v2")
        self.embedder = embedder
        self._model = (model or DEFAULT_MODEL, backend, base_url, api_key, cache)
        self._owned: list[LLM] = []
        if self.stage != "embedding" and self.llm is None:
            check_backend(backend, base_url)
        if not lazy:
            self.load()

    def load(self) -> None:
        """Load what the stage needs and was not handed: the embedder, or the LLM from ``model``.
        Done at construction, or with ``lazy=True`` here or at the first :meth:`run` (Haystack's
        ``warm_up``)."""
        if self.stage == "embedding":
            if self.embedder is None:
                from ..index import load_embedder

                self.embedder = load_embedder()
        elif self.llm is None:
            model, backend, base_url, api_key, cache = self._model
            self.llm = load_model(model, backend=backend, base_url=base_url, api_key=api_key, cache=cache)
            self._owned.append(self.llm)

    def run(self, query: str, texts: Sequence[str], *, ids: Sequence[str] | None = None,
            titles: Sequence[str] | None = None, metadata: Sequence[Mapping[str, Any]] | None = None,
            top_k: int | None = None) -> Winnowed:
        """Run the stage over ``texts`` for ``query``; ``ids``, ``titles`` and ``metadata`` (one per
        text) travel with the items. ``top_k`` overrides the constructor's for this call."""
        query = check_query(query)
        texts = _strings(texts, "documents")
        count = len(texts)
        ids = _strings(ids, "ids", count) if ids is not None else [str(i) for i in range(count)]
        titles = _strings(titles, "titles", count) if titles is not None else [""] * count
        metas = _mappings(metadata, count)
        keep = check_top_k(top_k) if top_k is not None else self.top_k
        # Passages are keyed by input position: the caller's ids may repeat or be missing.
        passages = [Passage(str(i), text, title) for i, (text, title) in enumerate(zip(texts, titles, strict=True))]
        if not passages:
            return Winnowed(query, self.stage, [], [], Trace())
        self.load()
        started = time.perf_counter()
        if self.stage in RERANK_METHODS:
            done = rerank(query, passages, self.stage, llm=self.llm, embedder=self.embedder, window=self.window,
                          step=self.step)
            ranked, trace = list(done.ranked), done.trace
            reasons: dict[int, tuple[Candidate, str]] = {}
        else:
            ranked, trace, reasons = self._filter(query, passages)
        trace.seconds = time.perf_counter() - started

        def item(c: Candidate) -> dict[str, Any]:
            i = int(c.passage.id)
            return {"index": i, "id": ids[i], "text": texts[i], "title": titles[i], "metadata": metas[i],
                    "stage_scores": stage_scores(c)}

        kept: list[Kept] = []
        dropped: dict[int, Dropped] = {}
        for position, c in enumerate(ranked, start=1):
            rank = c.rank_of(_scorer(self.stage)) or position
            if keep is not None and position > keep:
                dropped[int(c.passage.id)] = Dropped(**item(c), score=c.score,
                                                     reason=f"ranked {position} of {len(ranked)} kept; top_k={keep}")
                continue
            kept.append(Kept(**item(c), score=c.score, relevance=item_relevance(self.stage, c.score, rank, count),
                             rank=position, note=c.note))
        for i, (c, reason) in reasons.items():
            dropped[i] = Dropped(**item(c), score=c.score, reason=reason)
        return Winnowed(query, self.stage, kept, [dropped[i] for i in sorted(dropped)], trace)

    def _filter(self, query: str, passages: list[Passage]) -> tuple[list[Candidate], Trace,
                                                                     dict[int, tuple[Candidate, str]]]:
        """Run a filter's stages; the kept candidates best first and each dropped one with its reason."""
        from ..details import FilterDetails
        from ..methods.mainrag import judge_filter_stages
        from ..methods.rrr import relevance_filter_stages
        from ..rerank import as_candidates

        assert self.llm is not None
        state = QuestionState(Query(query), Trace(), as_candidates(query, passages))
        if self.stage == "judge_filter":
            stages: Sequence[Any] = judge_filter_stages(self.llm, self.judge_llm, judge_n=self.judge_n,
                                                        max_document_answer_tokens=self.max_document_answer_tokens)
        else:
            stages = relevance_filter_stages(self.llm, tau=self.tau, reorder=True, name="graded",
                                             filter_name="threshold")
        *scoring, cut = stages
        run_stages(scoring, [state])
        scored = list(state.ranked)  # every candidate with its score, before the cut
        cut.run([state])
        bar = state.trace.stages[-1].details
        assert isinstance(bar, FilterDetails)
        kept_ids = {c.passage.id for c in state.ranked}
        reasons: dict[int, tuple[Candidate, str]] = {}
        for c in scored:
            passage_id = c.passage.id
            if passage_id in kept_ids:
                continue
            if self.stage == "judge_filter":
                reason = (f"judge score {c.score:.3g} below the adaptive bar τ={bar.tau:.3g} (τ = mean - n·std = "
                          f"{bar.mean:.3g} - {self.judge_n:g}·{bar.std:.3g})")
            else:
                grade = state.grades[passage_id]
                reason = (f"grade {grade.argmax} not above τ={self.tau:g} (RRR keeps σ > τ; expected grade "
                          f"{grade.expected:.2f})")
            reasons[int(passage_id)] = (c, reason)
        return list(state.ranked), state.trace, reasons

    def close(self) -> None:
        """Close the models this Winnower loaded itself (not those handed in)."""
        for llm in self._owned:
            llm.close()
        self._owned.clear()


def _scorer(stage: str) -> str:
    """The name of the stage whose rank a kept item's relevance is read at."""
    return {"pointwise": "rerank", "judge_filter": "judge", "graded_filter": "graded"}.get(stage, stage)


def load_model(model: str, *, backend: str, base_url: str | list[str], api_key: str,
               cache: bool | str | Path = True) -> LLM:
    """:func:`winnow.load_llm`, with a bad backend named as the ``backend`` argument."""
    from ..llm import load_llm

    check_backend(backend, base_url)
    return load_llm(model, backend=backend, base_url=base_url, api_key=api_key, cache=cache)


def check_backend(backend: object, base_url: object) -> None:
    from ..llm import BACKENDS

    if backend not in BACKENDS:
        raise ArgumentError("backend", f"unknown backend {backend!r}", f"choose one of: {', '.join(BACKENDS)}")
    if backend == "openai" and not base_url:
        raise ArgumentError("base_url", "the openai backend needs the server's base_url",
                            "e.g. base_url='http://127.0.0.1:8080/v1'")


def _at_least(value: object, minimum: int, argument: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentError(argument, f"must be a whole number (got {value!r})")
    if value < minimum:
        raise ArgumentError(argument, f"must be at least {minimum} (got {value})")
    return value


def _strings(values: object, argument: str, count: int | None = None) -> list[str]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ArgumentError(argument, f"must be a list of strings (got {type(values).__name__})")
    bad = [i for i, v in enumerate(values) if not isinstance(v, str)]
    if bad:
        raise ArgumentError(f"{argument}[{bad[0]}]", f"must be a string (got {type(values[bad[0]]).__name__})")
    if count is not None and len(values) != count:
        raise ArgumentError(argument, f"has {len(values)} entries for {count} documents")
    return list(values)


def _mappings(metadata: object, count: int) -> list[dict[str, Any]]:
    if metadata is None:
        return [{} for _ in range(count)]
    if not isinstance(metadata, Sequence) or isinstance(metadata, (str, bytes)) or len(metadata) != count:
        raise ArgumentError("metadata", f"must be a list of {count} mappings, one per document")
    return [dict(m) for m in metadata]


class MethodRunner:
    """A whole Winnow method over a Winnow index, for the adapters' retrievers and query engines.

    Give ``pipeline`` (a :class:`winnow.pipeline.Pipeline`, whose method, index and models are used),
    or ``index`` (a folder made by ``winnow index`` or an opened index) and ``llm`` (or ``model``,
    ``backend``, ``base_url`` to load one). ``settings`` are the method's (n, k, judge_n, tau, …),
    checked by its typed settings; ``agents`` gives roles their own LLM ({"judge": llm}).
    """

    def __init__(self, method: str = "rankrag", *, index: Any = None, pipeline: Any = None, llm: LLM | None = None,
                 model: str | None = None, backend: str = "llama.cpp", base_url: str | list[str] = "",
                 api_key: str = "", retriever: str = "bm25", agents: Mapping[str, LLM] | None = None,
                 settings: Mapping[str, Any] | None = None, cache: bool | str | Path = True) -> None:
        from ..methods import METHODS, resolve_settings

        if not isinstance(method, str) or method not in METHODS:
            raise ArgumentError("method", f"unknown Winnow method {method!r}", f"choose one of: {', '.join(METHODS)}")
        if settings is not None and not isinstance(settings, Mapping):
            raise ArgumentError("settings", "must be a mapping of setting name to value "
                                            f"(got {type(settings).__name__})")
        self._owned: list[LLM] = []
        if pipeline is not None:
            from ..pipeline import Pipeline

            if not isinstance(pipeline, Pipeline):
                raise ArgumentError("pipeline", f"must be a winnow Pipeline (got {type(pipeline).__name__})")
            index, llm = pipeline.index, llm or pipeline.llm
            agents = {**pipeline.agents, **(agents or {})}
        if index is None:
            raise ArgumentError("index", "a Winnow index is needed: a folder made by `winnow index` or "
                                         "winnow.open_index(...)", "or pass pipeline=")
        if isinstance(index, (str, Path)):
            from .. import open_index

            index = open_index(index, retriever)
        elif not hasattr(index, "search_many"):
            raise ArgumentError("index", "must be an index folder or an opened Winnow index "
                                         f"(got {type(index).__name__})")
        llm = check_llm(llm)
        if llm is None:
            llm = load_model(model or DEFAULT_MODEL, backend=backend, base_url=base_url, api_key=api_key, cache=cache)
            self._owned.append(llm)
        try:
            own = METHODS[method].roles
            layer = SettingsLayer("settings", dict(settings or {}), field_of=lambda key: f"settings[{key!r}]")
            resolved = resolve_settings(method, [layer])
            self.method = METHODS[method](index, llm, resolved.settings,
                                          {r: a for r, a in (agents or {}).items() if r in own})
        except LayeredSettingError as error:
            self.close()
            raise ArgumentError(error.field, error.message, error.hint) from None
        except BaseException:
            self.close()
            raise

    @property
    def name(self) -> str:
        return self.method.name

    def select(self, query: str) -> Answer:
        """The passages the method keeps for ``query``, best first, without generating an answer."""
        return self.method.ask(check_query(query), answer=False)

    def ask(self, query: str) -> Answer:
        """The method's answer to ``query`` and the passages it answered from."""
        return self.method.ask(check_query(query))

    def close(self) -> None:
        for llm in self._owned:
            llm.close()
        self._owned.clear()


def method_items(answer: Answer) -> list[Kept]:
    """A method's kept passages as :class:`Kept` items (``index`` None: the method retrieved them).
    ``relevance`` is the last scoring stage's score where it is 0-1 (P("True")), else the rank-based
    1 - (rank - 1) / count, which orders them as the method did."""
    count = len(answer.passages)
    items = []
    for rank, c in enumerate(answer.passages, start=1):
        last = c.scores[-1].stage if c.scores else ""
        relevance = c.score if last == "rerank" else 1.0 - (rank - 1) / count
        items.append(Kept(None, c.passage.id, c.passage.text, c.score, relevance, rank, stage_scores(c),
                          c.passage.title, dict(c.passage.metadata), c.note))
    return items
