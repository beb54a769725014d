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
least scoring ones), w = 10 and s = 5". The paper gives N_aug no value; 3 is Winnow's. Two defaults
differ from the paper for a CPU: N (the paper retrieves 100, App. B: "N_rw*N = 500 calls"; 20
keeps a question within minutes) and the rewriter's token limit (Table 4: "token limit 20"; 48
here). ``--profile paper`` sets the paper's values. Relevance grades are memoised per document
within a question (a document retrieved again by a later rewrite is not graded twice) and, across
runs, by the LLM call cache: App. B's "database of previous calls", which cut its 500 relevance
calls per query to "around 300 amortized calls".
The reader answers from the top k of S*.

Over a batch, each round's retrieval, grading, filtering and rewriting run for all questions still
in the loop at once; a question that reached |S| ≥ N (or whose rewrite came back empty) leaves the
loop and waits for the rest at the final ordering.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping, Sequence

from ..details import PoolDetails
from ..llm.client import LLM
from ..prompts import listwise_prompt
from ..records import Candidate, CandidateList, StageScore
from ..settings import at_least
from ..stages import (
    GradedRelevanceReranker,
    KeepTop,
    ListwiseReranker,
    QueryRewriter,
    Reader,
    Retriever,
    ThresholdFilter,
)
from ..stages.contract import QuestionState, recording
from ..stages.listwise import check_listwise_prompt
from ..stages.retrieve import SearchIndex
from .base import Method, MethodSettings
from .rankgpt import check_window


@dataclass
class RRRSettings(MethodSettings):
    rewrites: int = 5  # N_rw, the most retrieval rounds (the first uses the original query)
    feedback_docs: int = 3  # N_aug, top retrieved documents shown to the rewriter per round
    tau: float = 1.0  # keep documents with σ > τ; τ=1 prunes those graded 1
    window: int = 10  # RankGPT window w
    step: int = 5  # RankGPT step s
    max_passage_words: int = 300  # RankGPT truncates passages to 300 words
    max_rewrite_tokens: int = 48
    listwise_prompt: Literal["rrr", "rankgpt"] = "rrr"  # App. A.3 as printed, or RankGPT's released prompt

    def check(self) -> None:
        super().check()
        at_least(self, 1, "rewrites", "max_rewrite_tokens")
        at_least(self, 0, "feedback_docs")
        check_window(self)


def relevance_filter_stages(llm: LLM, *, tau: float = 1.0, reorder: bool = False, name: str = "relevance",
                            filter_name: str = "filter") -> tuple[GradedRelevanceReranker, ThresholdFilter]:
    """RRR's σ and its cut (Algorithm 1 lines 5-6): grade each document 1-5 against the original query
    (App. A.2) and keep those with σ > τ (τ = 1 prunes the lowest grade, §4(D)). ``reorder`` ranks the
    kept documents by E[σ]; RRR itself keeps the retrieved order and sorts the union S at the end."""
    relevance = GradedRelevanceReranker(llm, name=name, reorder=reorder)
    return relevance, ThresholdFilter(tau=tau, graded_by=relevance.name, name=filter_name)


@dataclass
class _Loop:
    """One question's Algorithm 1 bookkeeping: S in the order found, and a record per round."""

    found: dict[str, Candidate] = field(default_factory=dict)
    found_in_round: dict[str, int] = field(default_factory=dict)
    rounds: list[dict] = field(default_factory=list)
    first_retrieval: CandidateList | None = None


class RRR(Method):
    name = "rrr"
    summary = ("rewrite-retrieve loop keeping documents the LLM grades above τ (1-5 scale, vs the original "
               "query), then RankGPT listwise rerank of the union, answer from the top k")
    stages = ("retrieve(q_t, N)", "relevance σ 1-5", "filter σ > τ", "rewrite (until |S| ≥ N)",
              "order by σ", "listwise rerank (w, s)", "generate(top k)")
    Settings = RRRSettings
    roles = {"rewrite": "the rewriter g", "relevance": "the relevance model σ", "rerank": "the listwise re-ranker h"}

    def __init__(self, index: SearchIndex, llm: LLM, settings: RRRSettings,
                 agents: Mapping[str, LLM] | None = None) -> None:
        super().__init__(index, llm, settings, agents)
        self.settings: RRRSettings = settings
        self.retriever = Retriever(index, n=settings.n)
        # σ is asked about the original query (§3.1 (ii); §5.3 (ii), Table 8), whatever query retrieved R_t.
        self.relevance, self.filter = relevance_filter_stages(self.llm_for("relevance"), tau=settings.tau)
        self.rewriter = QueryRewriter(self.llm_for("rewrite"), max_tokens=settings.max_rewrite_tokens,
                                      feedback_docs=settings.feedback_docs)
        self.reranker = ListwiseReranker(self.llm_for("rerank"), window=settings.window, step=settings.step,
                                         max_words=settings.max_passage_words, keep=None,
                                         template=listwise_prompt(check_listwise_prompt(settings.listwise_prompt)))
        self.keep_top = KeepTop(settings.k)
        self.reader = Reader(llm, max_tokens=settings.max_answer_tokens)
        self.stage_roles = {self.relevance.name: "relevance", self.rewriter.name: "rewrite",
                            self.reranker.name: "rerank"}

    def run_batch(self, batch: Sequence[QuestionState], *, answer: bool = True) -> None:
        loops = [_Loop() for _ in batch]
        for round_number in range(1, self.settings.rewrites + 1):
            active = [i for i, state in enumerate(batch) if not state.done]
            if not active:
                break
            self._round(round_number, [batch[i] for i in active], [loops[i] for i in active])
        self._order_by_sigma(batch, loops)
        self.reranker.run([state for state in batch if len(state.ranked) > 1])
        self.keep_top.run(batch)
        if answer:
            self.reader.run(batch)

    def _round(self, round_number: int, batch: list[QuestionState], loops: list[_Loop]) -> None:
        """Algorithm 1 lines 3-12 for every question still in the loop."""
        s = self.settings
        for state in batch:
            state.round = round_number
        self.retriever.run(batch)  # R_t = f(q_t, N)
        retrieved = [state.ranked for state in batch]
        self.relevance.run(batch)  # σ(q, z) for z in R_t
        self.filter.run(batch)  # F_t = {z : σ > τ}
        for state, loop, r_t in zip(batch, loops, retrieved, strict=True):
            loop.first_retrieval = loop.first_retrieval or r_t
            kept = state.ranked.candidates
            new = [c for c in kept if c.passage.id not in loop.found]
            for c in new:  # S = S ∪ F_t
                loop.found[c.passage.id] = c
                loop.found_in_round[c.passage.id] = round_number
            loop.rounds.append({"round": round_number, "query": state.search_text, "retrieved": len(r_t),
                                "kept": [c.passage.id for c in kept], "new": [c.passage.id for c in new],
                                "total": len(loop.found)})
            # Line 8, or the last round: a rewrite nobody will use is not generated.
            state.done = len(loop.found) >= s.n or round_number == s.rewrites
            if not state.done:
                state.feedback.append((state.search_text, r_t.passages[: s.feedback_docs]))  # π_t
        rewriting = [(state, loop) for state, loop in zip(batch, loops, strict=True) if not state.done]
        if rewriting:
            self.rewriter.run([state for state, _ in rewriting])  # q_{t+1} = g(q_t; π_t)
        for state, loop in rewriting:
            if state.done:
                loop.rounds[-1]["stopped"] = "the rewriter gave no query"

    def _order_by_sigma(self, batch: Sequence[QuestionState], loops: list[_Loop]) -> None:
        """Order S by σ(q, ·) (then E[σ], then the order found): the list the re-ranker h receives."""
        with recording(batch, "order", "sort", {"by": "σ(q, ·) then E[σ], then order found"},
                       with_input=False) as traces:
            for state, loop, stage in zip(batch, loops, traces, strict=True):
                grades = state.grades
                ordered = sorted(loop.found.values(), key=lambda c: (-grades[c.passage.id].argmax,
                                                                     -grades[c.passage.id].expected))
                pool = CandidateList(state.query, [
                    Candidate(c.passage, [*c.scores[:-1], StageScore("relevance", grades[c.passage.id].expected, rank)],
                              note=f"found in round {loop.found_in_round[c.passage.id]}")
                    for rank, c in enumerate(ordered, start=1)])
                details = stage.details_as(PoolDetails)
                details.rounds = loop.rounds
                if not pool.candidates and loop.first_retrieval is not None:
                    # Nothing cleared τ in any round: rather than answer from nothing, use the first
                    # retrieval ordered by E[σ], and say so.
                    first = loop.first_retrieval
                    pool = first.ranked_by("relevance", [grades[c.passage.id].expected for c in first])
                    for c in pool:
                        c.note = "no document cleared τ"
                    details.fallback = "no document cleared τ: using the first retrieval ordered by E[σ]"
                state.candidates = pool
                stage.output = pool.to_dicts()
