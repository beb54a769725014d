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
cross-encoder   a trained cross-encoder's relevance logit (``model``: a folder or hub id), no LLM: rerank
monot5          monoT5's P("true") (``model``: a folder or hub id), no LLM: rerank (RankRAG Table 6 and
                RRR Tables 1-3 compare with both)
judge_filter    MAIN-RAG's Agent-1 answers, Agent-2's judge s = log P("Yes") - log P("No"), and the
                adaptive judge bar τ = mean(s) - n·std(s) ("Adaptive Judge Bar"): filter
graded_filter   RRR's σ, keeping σ > τ (Algorithm 1 line 6; τ = 1, §4(D)): filter, kept ranked by E[σ]
==============  ==================================================================================

The six rerankers are :func:`winnow.rerank.rerank` itself; the two filters are the stages MAIN-RAG
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

import dataclasses
import math
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..errors import WinnowError
from ..llm.client import LLM
from ..records import Answer, Candidate, Passage, Query, Trace, Usage
from ..rerank import MODEL_RERANK_METHODS, RERANK_METHODS, relevance_score, rerank
from ..settings import LayeredSettingError, SettingError, SettingsLayer, resolve_layers
from ..stages.contract import QuestionState, run_stages
from ..text import text_problem
from .closing import Closing

if TYPE_CHECKING:
    from ..methods import Method
    from ..run_spec import RunOptions, RunSpec

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


#: Where a framework's OpenAI chat model keeps its model name, server address and API key.
OPENAI_CHAT_MODELS = (("model", "api_base_url", "api_key"),  # Haystack's OpenAIChatGenerator
                      ("model_name", "openai_api_base", "openai_api_key"),  # LangChain's ChatOpenAI
                      ("model", "api_base", "api_key"))  # LlamaIndex's OpenAI and OpenAILike
OPENAI_DEFAULT_URL = "https://api.openai.com/v1"


def check_llm(llm: object, argument: str = "llm") -> LLM | None:
    """``llm`` as a winnow LLM: one as it is, or a framework's OpenAI-compatible chat model
    (:func:`from_framework_model`) as a winnow LLM on the same server; anything else is refused."""
    if llm is None or isinstance(llm, LLM):
        return llm
    if isinstance(llm, str):
        raise ArgumentError(argument, f"must be a winnow LLM, not the name {llm!r}",
                            f"pass model={llm!r} to load a model by its name")
    converted = from_framework_model(llm)
    if converted is None:
        raise ArgumentError(argument, f"a {type(llm).__name__} cannot give Winnow the next-token "
                                      "log-probabilities its stages read",
                            "pass a winnow LLM (winnow.load_llm(model, backend=..., base_url=...)), model=, or an "
                            "OpenAI-compatible chat model (Haystack OpenAIChatGenerator, LangChain ChatOpenAI, "
                            "LlamaIndex OpenAILike) whose server returns logprobs")
    return converted


def from_framework_model(model: object) -> LLM | None:
    """A framework's own OpenAI-compatible chat model (Haystack ``OpenAIChatGenerator``, LangChain
    ``ChatOpenAI``, LlamaIndex ``OpenAI``/``OpenAILike``) as a winnow LLM on the openai backend: the
    same model name, server and key. Winnow reads log-probabilities (P("True"), grade and judge
    scores), which those classes do not expose, so it calls the server itself; the server must
    return them (llama.cpp's server and vLLM do). None for any other object. Azure's clients are not
    taken: their key travels in a header Winnow's backend does not send."""
    name = type(model).__name__
    if "OpenAI" not in name or "Azure" in name:
        return None
    for model_attribute, url_attribute, key_attribute in OPENAI_CHAT_MODELS:
        model_name = getattr(model, model_attribute, None)
        if isinstance(model_name, str) and model_name and hasattr(model, url_attribute):
            base_url = getattr(model, url_attribute) or OPENAI_DEFAULT_URL
            from ..llm import load_llm

            return load_llm(model_name, backend="openai", base_url=str(base_url),
                            api_key=_secret(getattr(model, key_attribute, None)))
    return None


def _secret(value: object) -> str:
    """An API key as the frameworks hold it: Haystack's ``Secret``, pydantic's ``SecretStr`` or text."""
    for reveal in ("resolve_value", "get_secret_value"):
        if callable(getattr(value, reveal, None)):
            return str(getattr(value, reveal)() or "")
    return value if isinstance(value, str) else ""


def describe_llm(llm: LLM) -> dict[str, str]:
    """How to load ``llm`` again: its model, backend and base_url, for an adapter saving its
    configuration (a Haystack pipeline's YAML, a LlamaIndex ``to_dict``). Never its API key: a
    reloaded OpenAI-compatible model reads ``WINNOW_OPENAI_API_KEY`` (or is given ``api_key=``)."""
    from ..models import REGISTRY

    identity = llm.identity
    backend = str(identity.get("backend", ""))
    model = str(identity.get("model", ""))
    path = getattr(llm.backend, "_path", None)
    if backend == "llama.cpp" and model not in REGISTRY and path is not None:
        model = str(path)  # a .gguf file named by its path: the stem alone would not load again
    return {"model": model, "backend": backend, "base_url": str(identity.get("base_url", ""))}


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


def winnow_metadata(item: Kept, stage: str, relevance_key: str = "winnow_relevance") -> dict[str, Any]:
    """The keys every adapter adds to a kept document's metadata; the 0-1 relevance under
    ``relevance_key`` (LangChain's rerankers call it ``relevance_score``)."""
    return {"winnow_stage": stage, "winnow_score": item.score, relevance_key: item.relevance,
            "winnow_rank": item.rank, "winnow_stage_scores": dict(item.stage_scores)}


def dropped_metadata(item: Dropped, stage: str) -> dict[str, Any]:
    """The keys every adapter adds to a dropped document's metadata (the reason above all)."""
    return {"winnow_stage": stage, "winnow_score": item.score, "winnow_stage_scores": dict(item.stage_scores),
            "winnow_dropped": item.reason}


def stage_scores(candidate: Candidate) -> dict[str, float]:
    """Every Winnow stage's score for ``candidate`` (the caller's own order, "input", left out)."""
    return {s.stage: s.score for s in candidate.scores if s.stage != "input"}


class Winnower(Closing):
    """One Winnow stage (see :data:`STAGES`) over lists a caller hands in.

    The LLM stages use ``llm`` (a :class:`winnow.llm.LLM`, any backend), or load ``model`` through
    :func:`winnow.load_llm` with ``backend`` ("llama.cpp" in-process, "openai" for an
    OpenAI-compatible server at ``base_url``); a model loaded here is closed by :meth:`close`.
    ``judge_llm`` (or ``judge_model``, loaded like ``model``) gives MAIN-RAG's judge its own model.
    ``embedding`` uses ``embedder`` or loads all-MiniLM-L6-v2 (the ``dense`` extra); ``cross-encoder``
    and ``monot5`` load ``model`` as the reranker (a folder or hub id; left out, the kind's default;
    the ``rerankers`` extra), with no LLM. ``top_k`` keeps
    the best k of what the stage keeps; ``judge_n`` is the adaptive bar's n,
    ``max_document_answer_tokens`` Agent-1's answer budget, ``tau`` the graded filter's τ,
    ``window``/``step`` the listwise window. :meth:`config` is every argument as plain values.
    """

    def __init__(self, stage: str = "pointwise", *, llm: LLM | None = None, model: str | None = None,
                 backend: str = "llama.cpp", base_url: str | list[str] = "", api_key: str = "",
                 judge_llm: LLM | None = None, judge_model: str | None = None, embedder: Any = None,
                 top_k: int | None = None, judge_n: float = 0.0, tau: float = 1.0, window: int = 10, step: int = 5,
                 max_document_answer_tokens: int = 32, cache: bool | str | Path = True, lazy: bool = False) -> None:
        self.stage = check_stage(stage)
        self.top_k = check_top_k(top_k)
        self.judge_n = check_number(judge_n, "judge_n")
        self.tau = check_number(tau, "tau")
        self.window, self.step = _listwise_window(window, step)
        self.max_document_answer_tokens = _at_least(max_document_answer_tokens, 1, "max_document_answer_tokens")
        self.llm = check_llm(llm)
        self.judge_llm = check_llm(judge_llm, "judge_llm")
        # A framework's chat model became a winnow LLM here: closed by close(), saved by its name.
        self._adopted = [m for m, given in ((self.llm, llm), (self.judge_llm, judge_llm)) if m is not given]
        if embedder is not None and not callable(getattr(embedder, "embed", None)):
            raise ArgumentError("embedder", f"must be a winnow Embedder (got {type(embedder).__name__})",
                                "winnow.index.load_embedder(), or leave it out to load all-MiniLM-L6-v2")
        self.embedder = embedder
        if judge_model is not None and (not isinstance(judge_model, str) or not judge_model.strip()):
            raise ArgumentError("judge_model", f"must be a model name (got {judge_model!r})")
        self.judge_model = judge_model
        self._given_model = model
        self._model = (model or DEFAULT_MODEL, backend, base_url, api_key, cache)
        self._owned: list[LLM] = [m for m in self._adopted if m is not None]
        if self.stage != "embedding" and self.stage not in MODEL_RERANK_METHODS and self.llm is None:
            check_backend(backend, base_url)
        if not lazy:
            self.load()

    def load(self) -> None:
        """Load what the stage needs and was not handed: the embedder, or the LLM from ``model``.
        Done at construction, or with ``lazy=True`` here or at the first :meth:`run` (Haystack's
        ``warm_up``)."""
        if self.stage in MODEL_RERANK_METHODS:  # a trained reranker, loaded once per process
            from ..models.rerankers import load_pair_scorer

            load_pair_scorer(self.stage, self._given_model or "")
            return
        if self.stage == "embedding":
            if self.embedder is None:
                from ..index import load_embedder

                self.embedder = load_embedder()
            return
        model, backend, base_url, api_key, cache = self._model
        if self.llm is None:
            self.llm = load_model(model, backend=backend, base_url=base_url, api_key=api_key, cache=cache)
            self._owned.append(self.llm)
        if self.stage == "judge_filter" and self.judge_llm is None and self.judge_model:
            self.judge_llm = load_model(self.judge_model, backend=backend, base_url=base_url, api_key=api_key,
                                        cache=cache)
            self._owned.append(self.judge_llm)

    def config(self) -> dict[str, Any]:
        """Every argument that rebuilds this Winnower, as plain values (for a framework's saved
        pipeline): a model handed in as ``llm`` is described by :func:`describe_llm` (its name,
        backend and base_url; never the API key), ``judge_llm`` by its model name. An ``embedder``
        is not recorded: the embedding stage loads the same default, all-MiniLM-L6-v2."""
        model, backend, base_url, _api_key, cache = self._model
        described: dict[str, Any] = {"model": self._given_model, "backend": backend, "base_url": base_url}
        if self.llm is not None and (self.llm not in self._owned or self.llm in self._adopted):
            described = dict(describe_llm(self.llm))
        judge_model = self.judge_model
        if self.judge_llm is not None and (self.judge_llm not in self._owned or self.judge_llm in self._adopted):
            judge_model = describe_llm(self.judge_llm)["model"]
        return {"stage": self.stage, **described, "judge_model": judge_model, "top_k": self.top_k,
                "judge_n": self.judge_n, "tau": self.tau, "window": self.window, "step": self.step,
                "max_document_answer_tokens": self.max_document_answer_tokens,
                "cache": str(cache) if isinstance(cache, Path) else cache}

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
            trained_model = (self._given_model or "") if self.stage in MODEL_RERANK_METHODS else ""
            done = rerank(query, passages, self.stage, llm=self.llm, embedder=self.embedder, window=self.window,
                          step=self.step, model=trained_model)
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


#: What a method adapter takes besides the run options of :class:`~winnow.run_spec.RunOptions`.
RUNNER_ARGUMENTS = ("index", "pipeline", "llm", "agents", "settings", "cache")
def checked_run_options(source: str, values: Mapping[str, Any], own: Sequence[str] = RUNNER_ARGUMENTS) -> Any:
    """``values`` as :class:`~winnow.run_spec.RunOptions` (:meth:`RunOptions.checked`); an unknown
    name (a typo) is an :class:`ArgumentError` naming it and listing what ``source`` takes."""
    from ..run_spec import RunOptions

    try:
        return RunOptions.checked(source, dict(values))
    except WinnowError as error:
        unknown = sorted(set(values) - {f.name for f in fields(RunOptions)})
        raise ArgumentError(unknown[0] if unknown else source, error.message,
                            f"{source}'s own arguments: {', '.join(own)}; {error.hint}") from None


def resolved_run(options: RunOptions, settings: dict[str, Any], source: str) -> RunSpec:
    """The :class:`~winnow.run_spec.RunSpec` of an adapter's run options and ``settings`` mapping,
    through the one resolver (:func:`~winnow.run_spec.resolve_run`); a setting given both as a
    keyword (``k=2``) and in ``settings`` must agree, and a refusal names the argument at fault
    (``settings['k']`` for the mapping's) as an :class:`ArgumentError`."""
    from ..run_spec import resolve_run

    named = options.setting_values()  # n=, k=, … given as keywords
    for key in sorted(named.keys() & settings.keys()):
        if named[key] != settings[key]:
            raise ArgumentError(key, f"given as {key}={named[key]!r} and settings[{key!r}]={settings[key]!r}",
                                "give it once")
    layer = SettingsLayer("settings", settings, field_of=lambda key: f"settings[{key!r}]")
    try:
        return resolve_run(options, settings=layer)
    except LayeredSettingError as error:
        raise ArgumentError(error.field, error.message, error.hint) from None
    except SettingError as error:
        raise ArgumentError(error.setting, error.message, error.hint) from None
    except WinnowError as error:
        raise ArgumentError(source, error.message, error.hint) from None


class MethodRunner(Closing):
    """A whole Winnow method over a Winnow index, for the adapters' retrievers and query engines.

    Give ``pipeline`` (a :class:`winnow.pipeline.Pipeline`, whose index and models are used), or
    ``index`` (a folder made by ``winnow index`` or an opened index) and ``llm`` (or the run options
    ``model``, ``backend``, ``base_url``, … to load one). Every other keyword is a run option of
    :class:`~winnow.run_spec.RunOptions` (``method``, ``retriever``, ``profile``, ``config``, the
    setting shortcuts ``n``, ``k``, …), checked by :meth:`RunOptions.checked`: a typo is refused
    naming it. ``settings`` are the method's (n, k, judge_n, tau, …), resolved with the run options,
    the shortcuts, the profile and a config file by :func:`~winnow.run_spec.resolve_run` (the one
    resolver of every front door), a bad one named ``settings['k']``.
    ``agents`` gives roles their own model ({"judge": llm} or {"judge": "model-name"}).

    Everything is checked at construction; with ``lazy`` the index and models are opened by
    :meth:`open` (or the first query), so a saved configuration loads back without loading a model.
    :meth:`config` is that configuration as plain values.
    """

    def __init__(self, method: str | None = None, *, index: Any = None, pipeline: Any = None, llm: LLM | None = None,
                 agents: Mapping[str, LLM | str] | None = None, settings: Mapping[str, Any] | None = None,
                 cache: bool | str | Path = True, lazy: bool = False, source: str = "MethodRunner",
                 **options: Any) -> None:
        if settings is not None and not isinstance(settings, Mapping):
            raise ArgumentError("settings", "must be a mapping of setting name to value "
                                            f"(got {type(settings).__name__})")
        if agents is not None and not isinstance(agents, Mapping):
            raise ArgumentError("agents", "must be a mapping of role to LLM or model name "
                                          f"(got {type(agents).__name__})")
        self._agent_llms = {role: check_llm(agent, f"agents[{role!r}]") or self._missing_agent(role)
                            for role, agent in (agents or {}).items() if not isinstance(agent, str)}
        named_agents = tuple(f"{role}={model}" for role, model in (agents or {}).items() if isinstance(model, str))
        run_options = checked_run_options(source, {"method": method, **options})
        if named_agents:
            run_options = dataclasses.replace(run_options, agents=named_agents + (run_options.agents or ()))
        self.spec = resolved_run(run_options, dict(settings or {}), source)
        self._api_key = run_options.api_key or ""
        self._threads = run_options.threads
        self._cache: bool | str | Path = False if run_options.no_cache else cache
        self._owned: list[LLM] = []  # the models this runner closes
        self._loaded: list[LLM] = []  # those it loaded from the run's model names
        self._llm = check_llm(llm)
        if self._llm is not None and self._llm is not llm:
            self._owned.append(self._llm)  # a framework's chat model, adopted: closed here, saved by name
        self._index = self._checked_index(index, pipeline)
        if self._llm is None:
            check_backend(self.spec.backend, self.spec.base_url)
        self.method: Method | None = None
        if not lazy:
            self.open()

    def _checked_index(self, index: Any, pipeline: Any) -> Any:
        """The index (a folder or an opened one), or a pipeline's index and models."""
        if pipeline is not None:
            from ..pipeline import Pipeline

            if not isinstance(pipeline, Pipeline):
                raise ArgumentError("pipeline", f"must be a winnow Pipeline (got {type(pipeline).__name__})")
            self._llm = self._llm or pipeline.llm
            self._agent_llms = {**pipeline.agents, **self._agent_llms}
            self.spec.retriever = pipeline.spec.retriever
            return pipeline.index
        if index is None:
            raise ArgumentError("index", "a Winnow index is needed: a folder made by `winnow index` or "
                                         "winnow.open_index(...)", "or pass pipeline=")
        if not isinstance(index, (str, Path)) and not hasattr(index, "search_many"):
            raise ArgumentError("index", "must be an index folder or an opened Winnow index "
                                         f"(got {type(index).__name__})")
        return index

    @staticmethod
    def _missing_agent(role: str) -> LLM:
        raise ArgumentError(f"agents[{role!r}]", "has no model", "give a winnow LLM or a model name, or leave the "
                                                                 "role out")

    def open(self) -> Method:
        """Open the index and load the models (once): done at construction unless ``lazy``."""
        if self.method is not None:
            return self.method
        from ..methods import METHODS
        from ..pipeline import load_run_llm

        spec = self.spec
        try:
            if isinstance(self._index, (str, Path)):
                from ..index import open_retriever

                self._index = open_retriever(self._index, spec.retriever, ann=spec.ann or None,
                                             ann_overrides=dict(spec.ann_set))

            def load(model: str) -> LLM:
                llm = load_run_llm(spec, model, api_key=self._api_key, cache=self._cache, threads=self._threads)
                self._owned.append(llm)
                self._loaded.append(llm)
                return llm

            if self._llm is None:
                self._llm = load(spec.model)
            loaded = {spec.model: self._llm}
            agents = dict(self._agent_llms)
            for role, model in spec.agents.items():
                if role not in agents:
                    agents[role] = loaded[model] if model in loaded else loaded.setdefault(model, load(model))
            own = METHODS[spec.method].roles
            self.method = METHODS[spec.method](self._index, self._llm, spec.method_settings(),
                                               {r: a for r, a in agents.items() if r in own})
        except BaseException:
            self.close()
            raise
        return self.method

    @property
    def name(self) -> str:
        return self.spec.method

    def with_settings(self, settings: Mapping[str, Any], source: str = "call") -> Method:
        """The method under this runner's settings with ``settings`` over them (a framework's per-call
        ``k``), over the same index and models; a bad value is refused naming its key."""
        from ..methods import METHODS, resolve_settings

        method = self.open()
        if not settings:
            return method
        layers = [SettingsLayer("the runner's settings", self.spec.settings), SettingsLayer(source, dict(settings))]
        try:
            resolved = resolve_settings(self.spec.method, layers)
        except LayeredSettingError as error:
            raise ArgumentError(error.field, error.message, error.hint) from None
        return METHODS[self.spec.method](self._index, method.llm, resolved.settings, dict(method.agents))

    def select(self, query: str, settings: Mapping[str, Any] | None = None) -> Answer:
        """The passages the method keeps for ``query``, best first, without generating an answer;
        ``settings`` override the runner's for this query."""
        query = check_query(query)
        return self.with_settings(settings or {}).ask(query, answer=False)

    def ask(self, query: str, settings: Mapping[str, Any] | None = None) -> Answer:
        """The method's answer to ``query`` and the passages it answered from."""
        query = check_query(query)
        return self.with_settings(settings or {}).ask(query)

    def config(self) -> dict[str, Any]:
        """The configuration that builds this runner again, as plain values: the resolved run (method,
        model, backend, base_url, retriever, profile, settings, agents' model names), a model handed
        in as ``llm`` described by :func:`describe_llm`, the index by its folder. Never the API key
        (a reloaded OpenAI-compatible model reads ``WINNOW_OPENAI_API_KEY``, or is given ``api_key=``)."""
        spec = self.spec
        model = {"model": spec.model, "backend": spec.backend, "base_url": spec.base_url}
        if self._llm is not None and self._llm not in self._loaded:
            model = describe_llm(self._llm)
        agents = dict(spec.agents)
        agents.update({role: describe_llm(llm)["model"] for role, llm in self._agent_llms.items()})
        index = self._index
        folder = str(index) if isinstance(index, (str, Path)) else getattr(index, "path", None)
        # An opened index names its retriever; a folder's path has a .name too, which is not one.
        retriever = spec.retriever if isinstance(index, (str, Path)) else getattr(index, "name", spec.retriever)
        described: dict[str, Any] = {"method": spec.method, "index": None if folder is None else str(folder),
                                     **model, "retriever": retriever if isinstance(retriever, str) else spec.retriever,
                                     "settings": dict(spec.settings)}
        optional = {"profile": spec.profile or None, "context_size": spec.context_size,
                    "max_inflight": spec.max_inflight, "slots": spec.slots, "timeout": spec.timeout,
                    "hedge": spec.hedge, "tokenizer": spec.tokenizer or None, "agents": agents or None,
                    "cache": str(self._cache) if isinstance(self._cache, Path) else self._cache,
                    "ann": spec.ann or None,
                    "ann_set": [f"{name}={value}" for name, value in spec.ann_set.items()] or None}
        described.update({key: value for key, value in optional.items() if value is not None})
        return described

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
