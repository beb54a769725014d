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

Defaults follow Table 4 (N_rw=5, N_aug=3, τ=1, w=10, s=5) except N: the paper retrieves 100, a CPU
default of 20 keeps a question within minutes. Relevance grades are memoised per document within a
question (a document retrieved again by a later rewrite is not graded twice) and, across runs, by
the LLM call cache, which the paper (§4D) credits with cutting relevance calls by about 40%.
The reader answers from the top k of S*.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..llm.client import LLM
from ..prompts import listwise_prompt
from ..records import Candidate, CandidateList, Query, StageScore, Trace
from ..stages import GradedRelevanceReranker, ListwiseReranker, Reader
from ..stages.base import stage_record
from ..stages.graded import RelevanceGrade
from ..stages.listwise import check_listwise_prompt
from ..stages.retrieve import SearchIndex
from ..stages.rewrite import QueryRewriter
from .base import Method, MethodSettings


@dataclass
class RRRSettings(MethodSettings):
    rewrites: int = 5  # N_rw, the most retrieval rounds (the first uses the original query)
    feedback_docs: int = 3  # N_aug, top retrieved documents shown to the rewriter per round
    tau: float = 1.0  # keep documents with σ > τ; τ=1 prunes those graded 1
    window: int = 10  # RankGPT window w
    step: int = 5  # RankGPT step s
    max_passage_words: int = 300  # RankGPT truncates passages to 300 words
    max_rewrite_tokens: int = 48
    listwise_prompt: str = "rrr"  # App. A.3 as printed; or "rankgpt" (stages.listwise.LISTWISE_PROMPTS)

    def validate(self, method: str) -> None:
        super().validate(method)
        check_listwise_prompt(self.listwise_prompt)


class RRR(Method):
    name = "rrr"
    summary = ("rewrite-retrieve loop keeping documents the LLM grades above τ (1-5 scale, vs the original "
               "query), then RankGPT listwise rerank of the union, answer from the top k")
    stages = ("retrieve(q_t, N)", "relevance σ 1-5", "filter σ > τ", "rewrite (until |S| ≥ N)",
              "order by σ", "listwise rerank (w, s)", "generate(top k)")
    Settings = RRRSettings

    def __init__(self, index: SearchIndex, llm: LLM, settings: RRRSettings, *, rewrite_llm: LLM | None = None,
                 relevance_llm: LLM | None = None, rerank_llm: LLM | None = None) -> None:
        super().__init__(settings)
        self.index = index
        self.relevance = GradedRelevanceReranker(relevance_llm or llm, name="relevance")
        self.rewriter = QueryRewriter(rewrite_llm or llm, max_tokens=settings.max_rewrite_tokens)
        self.reranker = ListwiseReranker(rerank_llm or llm, window=settings.window, step=settings.step,
                                         max_words=settings.max_passage_words, keep=None,
                                         template=listwise_prompt(check_listwise_prompt(settings.listwise_prompt)))
        self.reader = Reader(llm, max_tokens=settings.max_answer_tokens)

    def _retrieve_and_filter(self, query: Query, rewrite: str, round_number: int, trace: Trace,
                             grades: dict[str, RelevanceGrade]) -> tuple[CandidateList, list[Candidate]]:
        """Algorithm 1 lines 4-6 for one round: R_t, its grades against q, and F_t."""
        s = self.settings
        with stage_record(trace, "retrieve", getattr(self.index, "name", "retrieve"),
                          {"n": s.n, "round": round_number, "query": rewrite}) as stage:
            retrieved = self.index.search(rewrite, k=s.n)
            stage.output = retrieved.to_dicts()
        # σ is asked about the original query (§3.1 (ii), Table 8), whatever query retrieved R_t.
        against_original = CandidateList(query, retrieved.candidates)
        with stage_record(trace, "relevance", "graded", {"round": round_number, "prompt": self.relevance.template.name,
                                                         "against": "original query"}, against_original) as stage:
            unseen = CandidateList(query, [c for c in retrieved if c.passage.id not in grades])
            for grade in self.relevance.grade(unseen, stage):
                grades[grade.passage_id] = grade
            stage.details["grades"] = [grades[c.passage.id].to_dict() for c in retrieved]
            stage.details["already_graded"] = len(retrieved) - len(unseen)
            stage.output = stage.input
        with stage_record(trace, "filter", "threshold", {"round": round_number, "tau": s.tau,
                                                         "rule": "keep σ > τ"}, retrieved) as stage:
            kept, dropped = [], []
            for c in retrieved:
                sigma = grades[c.passage.id].argmax
                scored = Candidate(c.passage, [*c.scores, StageScore("relevance", float(sigma), 0)])
                if sigma > s.tau:
                    kept.append(scored)
                else:
                    dropped.append({"id": c.passage.id, "title": c.passage.title, "note": f"σ = {sigma} ≤ τ = {s.tau:g}"})
            stage.details["dropped"] = dropped
            stage.output = CandidateList(query, kept).to_dicts()
        return retrieved, kept

    def _run(self, query: Query, trace: Trace) -> tuple[str, CandidateList]:
        s = self.settings
        grades: dict[str, RelevanceGrade] = {}
        found: dict[str, Candidate] = {}  # S, in the order documents were first found
        found_in_round: dict[str, int] = {}
        history: list[tuple[str, list]] = []
        rounds: list[dict] = []
        rewrite = query.text
        first_retrieval = CandidateList(query)
        for round_number in range(1, s.rewrites + 1):
            retrieved, kept = self._retrieve_and_filter(query, rewrite, round_number, trace, grades)
            if round_number == 1:
                first_retrieval = retrieved
            new = [c for c in kept if c.passage.id not in found]
            for c in new:
                found[c.passage.id] = c
                found_in_round[c.passage.id] = round_number
            rounds.append({"round": round_number, "query": rewrite, "retrieved": len(retrieved),
                           "kept": [c.passage.id for c in kept], "new": [c.passage.id for c in new],
                           "total": len(found)})
            if len(found) >= s.n or round_number == s.rewrites:
                break  # line 8, or the last round: a rewrite nobody will use is not generated
            history.append((rewrite, retrieved.passages[: s.feedback_docs]))
            with stage_record(trace, "rewrite", "rewriter", {"round": round_number,
                                                             "feedback_docs": s.feedback_docs}) as stage:
                next_query = self.rewriter.rewrite(query.text, history, stage)
            if not next_query:
                rounds[-1]["stopped"] = "the rewriter gave no query"
                break
            rewrite = next_query
        with stage_record(trace, "order", "sort", {"by": "σ(q, ·) then E[σ], then order found"}) as stage:
            ordered = sorted(found.values(), key=lambda c: (-grades[c.passage.id].argmax,
                                                            -grades[c.passage.id].expected))
            pool = CandidateList(query, [
                Candidate(c.passage, [*c.scores[:-1], StageScore("relevance", grades[c.passage.id].expected, rank)],
                          note=f"found in round {found_in_round[c.passage.id]}")
                for rank, c in enumerate(ordered, start=1)])
            stage.details["rounds"] = rounds
            if not pool.candidates:
                # Nothing cleared τ in any round: rather than answer from nothing, use the first
                # retrieval ordered by E[σ], and say so.
                expected = [grades[c.passage.id].expected for c in first_retrieval]
                pool = first_retrieval.ranked_by("relevance", expected)
                for c in pool:
                    c.note = "no document cleared τ"
                stage.details["fallback"] = "no document cleared τ: using the first retrieval ordered by E[σ]"
            stage.output = pool.to_dicts()
        reranked = self.reranker.run(pool, trace) if len(pool) > 1 else pool
        top = reranked.truncated(s.k)
        return self.reader.run(top, trace), top
