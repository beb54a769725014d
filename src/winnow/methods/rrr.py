"""GAR-meets-RAG / RRR: rewrite, retrieve, rerank (Arora et al., 2023, §3.2, Algorithm 1).

    q_1 = q; S = {}
    for t = 1..N_rw:
        R_t = f(q_t, N)                                   retrieve N documents for the rewrite
        σ(q, z) for z in R_t                              graded 1..5 against the ORIGINAL query
        F_t = {z in R_t : σ(q, z) > τ}; S = S ∪ F_t
        if |S| ≥ N: break
        π_t = Append(π_{t-1}, q_t, top N_aug of R_t by retriever score)
        q_{t+1} = g(q_t; π_t)
    order S by σ(q, ·); S* = h(S)                         RankGPT listwise, window w, step s

Defaults follow §4(D): "The best values for these parameters are N_rw = 5, τ = 1 (i.e., prune the
least scoring ones), w = 10 and s = 5", and the rewriter's token limit is Table 4's 20. The paper
gives N_aug no value; 3 is Winnow's. One default differs from the paper for a CPU: N (the paper
retrieves 100, App. B: "N_rw*N = 500 calls"; 20 keeps a question within minutes); ``--profile
paper`` sets the paper's values. Relevance grades are memoised per document within a question (a
document retrieved again by a later rewrite is not graded twice) and, across runs, by the LLM call
cache: App. B's "database of previous calls", which cut its 500 relevance calls per query to
"around 300 amortized calls".
The reader answers from the top k of S*.

The paper's ablations are settings (their defaults are Algorithm 1):

- ``feedback="none"``: §5.2 (a), Table 5, "omitting the addition of retrieved results to the
  re-writer prompt π_t (in Step 12 of Algorithm 1)": the rewriter sees the queries tried, no results.
- ``feedback="relevance"``: §5.3 (iii), Table 9, the N_aug documents of R_t with the highest σ
  rather than the top N_aug by retriever score (Step 11).
- ``relevance_query="rewrite"``: §5.3 (ii), Table 8, σ(q_t, z) against the rewrite that retrieved z
  instead of the original q; S is then ordered by the grade that admitted each document.
- ``rerank="none"``: §5.3 (i), Table 7, no final re-ranker h: S ordered by σ is the answer list.
- ``cap_pool_at_n``: S cut to its top N (by σ) before re-ranking. Algorithm 1 re-ranks all of S,
  which can exceed N (the last round adds every new document that clears τ); §4(C) and App. B
  re-rank "N documents in S" and count ((N - w) // s) + 1 windows for it.

Two settings choose between the paper's σ as printed and what Winnow reads beside it:

- ``relevance_answer``: how σ's answer (App. A.2, "<<Score>>4<</Score>>") is got. Winnow starts the
  answer with "<<Score>>" and reads the digit's log-probabilities, which also gives E[σ]; a backend
  that does not continue a started answer (OpenAI's API) gets ``prefill-or-digit``'s bare-digit
  variant of A.2 (not the paper's wording) or ``prefill-or-generate``'s A.2 as printed, generated
  and parsed (``--profile paper``); ``generate`` generates and parses on every backend.
- ``sigma_ties``: Step 15 orders S by σ, an integer 1..5, so many documents tie. ``expected``
  (Winnow's) breaks a tie by E[σ] from the log-probabilities, then by the order found; ``found``
  (``--profile paper``) by the order found alone (a stable sort by the integer grade: round by round,
  each round in retrieval order). With ``rerank="none"`` (Table 7) this order is the output.

``second_pass_depth`` and the non-paper fallbacks of ``rerank`` are :mod:`.final_rerank`'s.

Over a batch, each round's retrieval, grading, filtering and rewriting run for all questions still
in the loop at once; a question that reached |S| ≥ N (or whose rewrite came back empty) leaves the
loop and waits for the rest at the final ordering.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Literal, Mapping, Sequence

from ..details import PoolDetails
from ..llm.client import LLM
from ..records import Candidate, CandidateList, Passage, StageScore
from ..settings import RerankerPath, at_least
from ..stages import GradedRelevanceReranker, KeepTop, QueryRewriter, Reader, Recipe, Retriever, ThresholdFilter
from ..stages.contract import QuestionState, recording
from ..stages.recipe import Composable, label
from ..stages.relevance_grade import RelevanceGrade
from ..stages.retrieve import SearchIndex
from .base import AdaptiveDepthSettings, Method, adaptive_depth, guarded
from .final_rerank import (
    RERANK_ROLES,
    check_final_rerank,
    final_reranker,
    rerank_deviations,
    second_pass,
    second_pass_without_its_model,
)
from .rankgpt import check_window
from .reranking import TrainedRerankers


@dataclass
class RRRSettings(AdaptiveDepthSettings):
    upper_bounds: ClassVar[dict[str, float]] = {"rewrites": 1000, "feedback_docs": 100_000, "window": 100_000,
                                               "max_passage_words": 1_000_000, "max_rewrite_tokens": 1_048_576}
    server_caps: ClassVar[dict[str, int]] = {"max_rewrite_tokens": 256, "rewrites": 10, "feedback_docs": 20,
                                             "window": 100, "max_passage_words": 1000}
    contract_values: ClassVar[dict[str, Any]] = {"rewrites": 2, "window": 3, "step": 2}  # one rewrite, two windows
    rewrites: int = 5  # N_rw, the most retrieval rounds (the first uses the original query)
    feedback_docs: int = 3  # N_aug, top retrieved documents shown to the rewriter per round
    feedback_words: int = 100  # each feedback document cut to this many words (not in the paper); 0: whole
    tau: float = 1.0  # keep documents with σ > τ; τ=1 prunes those graded 1
    window: int = 10  # RankGPT window w
    step: int = 5  # RankGPT step s
    max_passage_words: int = 300  # RankGPT truncates passages to 300 words
    max_rewrite_tokens: int = 20  # Table 4: "Rewriter g … token limit 20"
    listwise_prompt: Literal["rrr", "rankgpt"] = "rrr"  # App. A.3 as printed, or RankGPT's released prompt
    # h; none: Table 7 ablation; cross-encoder/monot5: the trained baselines of Tables 1-3 (final_rerank)
    rerank: Literal["listwise", "pointwise", "graded", "cross-encoder", "monot5", "none"] = "listwise"
    rerank_model: RerankerPath = ""  # rerank=cross-encoder/monot5: a folder or hub id ("": the kind's default)
    second_pass_depth: int = 0  # §4(C): re-rank the top 30 again with the rerank2 model; 0 is off
    feedback: Literal["retriever", "relevance", "none"] = "retriever"  # Step 11; Table 9, Table 5 ablations
    relevance_query: Literal["original", "rewrite"] = "original"  # σ against q; Table 8 ablation: q_t
    cap_pool_at_n: bool = False  # re-rank only the top N of S (§4(C), App. B); Algorithm 1 re-ranks all of S
    # σ's answer: "<<Score>>" started and read from log-probabilities; where a backend does not continue
    # it, the bare-digit prompt (Winnow's) or A.2 generated and parsed (the paper's); or always generated
    relevance_answer: Literal["prefill-or-digit", "prefill-or-generate", "generate"] = "prefill-or-digit"
    sigma_ties: Literal["expected", "found"] = "expected"  # S's order among equal σ: E[σ] then found, or found

    def check(self) -> None:
        super().check()
        at_least(self, 1, "rewrites", "max_rewrite_tokens")
        at_least(self, 0, "feedback_docs", "feedback_words")
        check_window(self)
        check_final_rerank(self)

    def deviations(self) -> dict[str, str]:
        return {**super().deviations(), **rerank_deviations(self)}

    def backend_deviations(self, backend: str) -> dict[str, str]:
        """On an OpenAI-compatible server, which may not continue a started answer, the default
        ``relevance_answer`` may send σ the bare-digit prompt instead of A.2 as printed."""
        if backend != "openai" or self.relevance_answer != "prefill-or-digit":
            return {}
        return {"relevance_answer": "σ is asked with A.2's answer format changed to the bare digit where the server "
                                    "does not continue the started \"<<Score>>\" (OpenAI's API); the paper's "
                                    "A.2 is relevance_answer=prefill-or-generate (--profile paper)"}


#: ``relevance_answer`` -> (start σ's answer with "<<Score>>", what a backend that does not continue it gets).
RELEVANCE_ANSWERS: dict[str, tuple[bool, Literal["first-token", "generate"]]] = {
    "prefill-or-digit": (True, "first-token"), "prefill-or-generate": (True, "generate"),
    "generate": (False, "generate")}


def sigma_order(grade: RelevanceGrade, ties: str = "expected") -> tuple[int, float]:
    """Sort key, best first: σ (the argmax grade), then E[σ] between equal grades (``ties="expected"``)
    or nothing, leaving a stable sort's found order (``ties="found"``, the paper's integer σ)."""
    return -grade.argmax, -grade.expected if ties == "expected" else 0.0


def relevance_filter_stages(llm: LLM, *, tau: float = 1.0, reorder: bool = False, name: str = "relevance",
                            filter_name: str = "filter", against: Literal["query", "search_text"] = "query",
                            answer: str = "prefill-or-digit") -> tuple[GradedRelevanceReranker, ThresholdFilter]:
    """RRR's σ and its cut (Algorithm 1 lines 5-6): grade each document 1-5 against the original query
    (App. A.2) and keep those with σ > τ (τ = 1 prunes the lowest grade, §4(D)). ``reorder`` ranks the
    kept documents by E[σ]; RRR itself keeps the retrieved order and sorts the union S at the end.
    ``answer`` is the ``relevance_answer`` setting (:data:`RELEVANCE_ANSWERS`)."""
    prefill, when_not_continued = RELEVANCE_ANSWERS[answer]
    relevance = GradedRelevanceReranker(llm, name=name, reorder=reorder, against=against, prefill=prefill,
                                        when_not_continued=when_not_continued)
    return relevance, ThresholdFilter(tau=tau, graded_by=relevance.name, name=filter_name)


@dataclass
class _Loop:
    """One question's Algorithm 1 bookkeeping: S in the order found, the grade that admitted each
    document (σ of the round that found it), and a record per round."""

    found: dict[str, Candidate] = field(default_factory=dict)
    found_in_round: dict[str, int] = field(default_factory=dict)
    grades: dict[str, RelevanceGrade] = field(default_factory=dict)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    first_retrieval: CandidateList | None = None
    first_grades: dict[str, RelevanceGrade] = field(default_factory=dict)


@dataclass
class RewriteLoop(Composable):
    """Algorithm 1 lines 2-15 as a value: each round runs ``round`` (retrieve, σ, the cut at τ) and,
    for the questions not done, ``rewriter``, at most ``rounds`` times or until |S| ≥ ``until``; then
    S is ordered by σ (its top ``until`` with ``cap``). The loop keeps S across rounds, so the method
    runs it (``run_loop``, RRR's own); the value is what its recipe prints."""

    round: Recipe
    rewriter: QueryRewriter
    rounds: int
    until: int
    cap: bool
    run_loop: Callable[[Sequence[QuestionState]], None]
    name: str = "rewrite_loop"

    @property
    def steps(self) -> tuple[Any, ...]:
        """The stages a round runs (what :func:`winnow.testing.leaves` walks)."""
        return (*self.round.steps, self.rewriter)

    def run(self, batch: Sequence[QuestionState]) -> None:
        self.run_loop(batch)

    def label(self) -> str:
        order = f"'σ, top {self.until}'" if self.cap else "'σ'"
        return (f"RewriteLoop({self.round!r} >> {label(self.rewriter)}, rounds={self.rounds}, "
                f"until='|S| >= {self.until}', order={order})")


class RRR(Method):
    name = "rrr"
    summary = ("rewrite-retrieve loop keeping documents the LLM grades above τ (1-5 scale, vs the original "
               "query), then RankGPT listwise rerank of the union, answer from the top k")
    stages = ("retrieve(q_t, N)", "relevance σ 1-5", "filter σ > τ", "rewrite (until |S| ≥ N)",
              "order by σ [top N]", "listwise rerank (w, s) [or a fallback, or none]",
              "[second pass: top d on rerank2]", "generate(top k)")
    Settings = RRRSettings
    roles = {"rewrite": "the rewriter g", "relevance": "the relevance model σ", **RERANK_ROLES}

    def __init__(self, index: SearchIndex, llm: LLM, settings: RRRSettings,
                 agents: Mapping[str, LLM] | None = None, rerankers: TrainedRerankers | None = None) -> None:
        super().__init__(index, llm, settings, agents, rerankers)
        self.settings: RRRSettings = settings
        self.retriever = Retriever(index, n=settings.n)
        # σ is asked about the original query (§3.1 (ii); §5.3 (ii), Table 8), whatever query retrieved
        # R_t, unless the Table 8 ablation asks it about q_t.
        against: Literal["query", "search_text"] = "query" if settings.relevance_query == "original" else "search_text"
        self.relevance, self.filter = relevance_filter_stages(self.llm_for("relevance"), tau=settings.tau,
                                                              against=against, answer=settings.relevance_answer)
        self.rewriter = QueryRewriter(self.llm_for("rewrite"), max_tokens=settings.max_rewrite_tokens,
                                      feedback_docs=0 if settings.feedback == "none" else settings.feedback_docs,
                                      feedback=settings.feedback, max_words=settings.feedback_words or None)
        # A graded h on the relevance model's own model may reuse σ(q, ·): the same question, asked again.
        same_grades = self.llm_for("rerank") is self.llm_for("relevance") and against == "query"
        self.reranker = final_reranker(settings, self.llm_for("rerank"), reuse_grades=same_grades,
                                       rerankers=self.rerankers)
        self.second_pass = second_pass(settings, self.llm_for("rerank2"))
        if notice := second_pass_without_its_model(settings, self.agents, llm):
            self.notice(notice)
        self.keep_top = KeepTop(settings.k)
        self.reader = Reader(llm, max_tokens=settings.max_answer_tokens)
        # Adaptive depth reads R_1: a sure question leaves the loop before σ, h seeing its top few (or none).
        self.depth = adaptive_depth(settings, self.retriever)
        self.stage_roles = {self.relevance.name: "relevance", self.rewriter.name: "rewrite"}
        if self.reranker is not None:
            self.stage_roles[self.reranker.name] = "rerank"
        if self.second_pass is not None:
            self.stage_roles[self.second_pass.name] = "rerank2"
        self.loop = RewriteLoop(self.retriever >> guarded(settings, self.relevance, self.filter), self.rewriter,
                                settings.rewrites, settings.n, settings.cap_pool_at_n, self._loop)
        passes = [stage for stage in (self.reranker, self.second_pass) if stage is not None]
        self.passes = Recipe.of(guarded(settings, *passes)) if passes else Recipe.of()
        # What run_batch runs, as a value: a list of one passage is not re-ranked.
        self.recipe = (self.depth >> self.loop if self.depth.on else self.loop) >> self.passes >> self.keep_top \
            >> self.reader

    def run_batch(self, batch: Sequence[QuestionState], *, answer: bool = True) -> None:
        # With adaptive depth, a question whose first retrieval is sure leaves before σ and rewrites:
        # h re-ranks only its top candidates (AdaptiveDepth.run_within).
        sure = self._sure_at_first_retrieval(batch)
        looped = [state for i, state in enumerate(batch) if i not in sure]
        if looped:
            self.loop.run(looped)
        reranking = [state for state in looped if len(state.ranked) > 1]  # a list of one is not re-ranked
        if reranking:
            self.passes.run(reranking)
        if sure:
            self.depth.run_within([batch[i] for i in sure], list(sure.values()), list(self.passes))
        self.keep_top.run(batch)
        if answer:
            self.reader.run(batch)

    def _loop(self, batch: Sequence[QuestionState]) -> None:
        """Algorithm 1's rounds over the questions still in the loop, then S ordered by σ."""
        loops = [_Loop() for _ in batch]
        for round_number in range(1, self.settings.rewrites + 1):
            active = [i for i, state in enumerate(batch) if not state.done]
            if not active:
                break
            # With adaptive depth on, R_1 was retrieved when the depth was decided.
            self._round(round_number, [batch[i] for i in active], [loops[i] for i in active],
                        retrieve=round_number > 1 or not self.depth.on)
        self._order_by_sigma(batch, loops)

    def _sure_at_first_retrieval(self, batch: Sequence[QuestionState]) -> dict[int, int]:
        """With adaptive depth, retrieve R_1 for every question and decide on it: each question whose
        first stage is sure (question index -> the depth h sees) leaves the loop before σ and rewrites."""
        if not self.depth.on:
            return {}
        for state in batch:
            state.round = 1
        self.retriever.run(batch)
        sure = {i: depth for i, depth in enumerate(self.depth.decide(batch)) if depth is not None}
        for i in sure:
            batch[i].done = True
        return sure

    def _round(self, round_number: int, batch: list[QuestionState], loops: list[_Loop], *,
               retrieve: bool = True) -> None:
        """Algorithm 1 lines 3-12 for every question still in the loop (R_1 already retrieved
        when ``retrieve`` is False)."""
        s = self.settings
        for state in batch:
            state.round = round_number
        if retrieve:
            self.retriever.run(batch)  # R_t = f(q_t, N)
        retrieved = [state.ranked for state in batch]
        self.relevance.run(batch)  # σ(q, z) for z in R_t
        self.filter.run(batch)  # F_t = {z : σ > τ}
        for state, loop, r_t in zip(batch, loops, retrieved, strict=True):
            if loop.first_retrieval is None:
                loop.first_retrieval = r_t
                loop.first_grades = {c.passage.id: state.grades[c.passage.id] for c in r_t}
            kept = state.ranked.candidates
            new = [c for c in kept if c.passage.id not in loop.found]
            for c in new:  # S = S ∪ F_t
                loop.found[c.passage.id] = c
                loop.found_in_round[c.passage.id] = round_number
                loop.grades[c.passage.id] = state.grades[c.passage.id]
            loop.rounds.append({"round": round_number, "query": state.search_text, "retrieved": len(r_t),
                                "kept": [c.passage.id for c in kept], "new": [c.passage.id for c in new],
                                "total": len(loop.found)})
            # Line 8, or the last round: a rewrite nobody will use is not generated.
            state.done = len(loop.found) >= s.n or round_number == s.rewrites
            if not state.done:
                state.feedback.append((state.search_text, self._feedback_documents(state, r_t)))  # π_t
        rewriting = [(state, loop) for state, loop in zip(batch, loops, strict=True) if not state.done]
        if rewriting:
            self.rewriter.run([state for state, _ in rewriting])  # q_{t+1} = g(q_t; π_t)
        for state, loop in rewriting:
            if state.done:
                loop.rounds[-1]["stopped"] = "the rewriter gave no query"

    def _feedback_documents(self, state: QuestionState, retrieved: CandidateList) -> list[Passage]:
        """R_{t,N_aug}, the documents shown to the rewriter with q_t: Step 11's "top N_aug documents …
        from R_t (using retriever scores in Step 4)"; with ``feedback="relevance"`` the N_aug of
        highest σ (Table 9; retriever order between equal grades); none for ``feedback="none"`` (Table 5)."""
        s = self.settings
        if s.feedback == "none":
            return []
        if s.feedback == "relevance":
            by_sigma = sorted(retrieved.candidates,
                              key=lambda c: sigma_order(state.grades[c.passage.id], s.sigma_ties))
            return [c.passage for c in by_sigma[: s.feedback_docs]]
        return retrieved.passages[: s.feedback_docs]

    def _order_by_sigma(self, batch: Sequence[QuestionState], loops: list[_Loop]) -> None:
        """Order S by σ(q, ·), then E[σ] (``sigma_ties="expected"``), then the order found: the list
        the re-ranker h receives. With ``cap_pool_at_n``, only its top N go on (§4(C): "re-rank N
        documents in S")."""
        s = self.settings
        by = "σ(q, ·)" if s.relevance_query == "original" else "σ(q_t, ·) of the round that found it"
        ties = "E[σ], then order found" if s.sigma_ties == "expected" else "order found"
        with recording(batch, "order", "sort", {"by": f"{by} then {ties}",
                                                "cap_at_n": s.n if s.cap_pool_at_n else None},
                       with_input=False) as traces:
            for state, loop, stage in zip(batch, loops, traces, strict=True):
                grades = loop.grades
                ordered = sorted(loop.found.values(), key=lambda c: sigma_order(grades[c.passage.id], s.sigma_ties))
                pool = CandidateList(state.query, [
                    Candidate(c.passage, [*c.scores[:-1], StageScore("relevance", grades[c.passage.id].expected, rank)],
                              note=f"found in round {loop.found_in_round[c.passage.id]}")
                    for rank, c in enumerate(ordered, start=1)])
                details = stage.details_as(PoolDetails)
                details.rounds = loop.rounds
                if s.cap_pool_at_n and len(pool) > s.n:
                    details.beyond_n = [c.passage.id for c in pool.candidates[s.n:]]
                    pool = pool.truncated(s.n)
                if not pool.candidates and loop.first_retrieval is not None:
                    # Nothing cleared τ in any round: rather than answer from nothing, use the first
                    # retrieval ordered by E[σ], and say so.
                    first = loop.first_retrieval
                    pool = first.ranked_by("relevance", [loop.first_grades[c.passage.id].expected for c in first])
                    for c in pool:
                        c.note = "no document cleared τ"
                    details.fallback = "no document cleared τ: using the first retrieval ordered by E[σ]"
                state.candidates = pool
                stage.output = pool.to_dicts()
