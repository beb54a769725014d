"""Graded relevance σ(q, z) ∈ {1..5}: RRR's relevance model (Arora et al., 2023, §3.1-3.2, App. A.2).

Each (query, passage) pair is put to the model with the relevance prompt of Appendix A.2, which
asks for the answer as ``<<Score>>n<</Score>>``. The first token of that answer is "<<", not the
grade, so the assistant turn is started with ``<<Score>>`` ("prefill"): llama.cpp's chat template
leaves a final assistant message open and continues it, which makes the grade digit the next token.
The stage's score is the expected grade over the next-token probabilities of "1".."5", one forward
pass per passage; the argmax digit is what a greedy model would have answered, the paper's σ.

When the log-probabilities say nothing about the digits (none of "1".."5" among the top next
tokens, or another token the most probable one), the model is asked to generate a few tokens instead
and the grade is parsed from the text (:func:`parse_score`).

A server that does not continue a started turn (a hosted API without vLLM's
``continue_final_message``; :mod:`winnow.llm.continuation` asks once per backend) gets no prefill:
A.2 with its answer format changed to the bare digit (``rrr.relevance_first_token``, not the
paper's wording), the grade read from the first token's probabilities, or from the first position
of a generated answer (:func:`parse_leading_grade`), never from a digit further on. With
``when_not_continued="generate"`` such a server is sent A.2 as printed instead, and the grade is
parsed from the "<<Score>>4<</Score>>" it writes: the paper's σ, an integer with no E[σ] beside it.
``prefill=False`` does that on every backend.

:class:`ThresholdFilter` is Algorithm 1 line 6: keep z with σ(q, z) > τ (τ = 1 by default, §4(D):
"τ = 1 (i.e., prune the least scoring ones)").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Literal, Sequence

from ..details import FilterDetails, GradedDetails
from ..llm.base import ChoiceScores
from ..llm.choices import normalise_token
from ..llm.client import LLM
from ..llm.continuation import continuation_support
from ..prompts import GradedPromptTemplate, graded_prompt
from ..records import Candidate, CandidateList, Passage, StageTrace, Trace
from .contract import ListStage, QuestionState, recording, round_settings
from .fitting import fit_one_passage
from .relevance_grade import RelevanceGrade

GRADES = ("1", "2", "3", "4", "5")
#: The grade given to an answer no grade can be read from: such an answer is no evidence of
#: relevance, so it counts as the least relevant grade and falls to τ = 1.
UNREADABLE_GRADE = 1

# A sign is part of the number: "-3" is minus three, no grade, never 3 with its minus sign dropped.
_NUMBER = r"([-+−]?[0-9]+(?:\.[0-9]+)?)"
_SCORE_TAG = re.compile(r"<<\s*score\s*>>\s*" + _NUMBER, re.IGNORECASE)
# Linear on long digit runs: a number starts after a non-digit, and possessive quantifiers never give
# digits back (a shorter run is followed by a digit, which cannot match what comes next, so this finds
# what the backtracking form would, without its quadratic retries from every position of the run).
_SCORE_CLOSE = re.compile(r"(?<![0-9])([-+−]?[0-9]++(?:\.[0-9]++)?+)\s*+<<\s*/\s*score\s*>>",
                          re.IGNORECASE)
# A signed number only where the sign cannot be a hyphen ("1-5" is a range, "-3" a negative number).
_ANY_NUMBER = re.compile(r"(?:(?<![0-9A-Za-z])[-−])?[0-9]+(?:\.[0-9]+)?")
# The first-token answer (the fallback prompt without a prefill): the grade and nothing attached to it.
_LEADING_GRADE = re.compile(r"\s*([1-5])(?![0-9/-]|[.,][0-9])")


def _grade(number: str) -> int | None:
    # Length check first: a long digit run is no grade, and int() refuses over 4300 digits.
    number = number.removeprefix("+")
    if "." in number or number[:1] in ("-", "−") or len(number) > 3:
        return None
    value = int(number)
    return value if 1 <= value <= 5 else None


def parse_score(text: str) -> int | None:
    """The grade 1..5 in a generated answer, or None when it holds none.

    Read in order of trust: the A.2 format ``<<Score>>n`` (closing tag optional, since a stop
    sequence or the token budget may cut it); ``n<</Score>>`` (a server that continued the
    prefilled ``<<Score>>`` without echoing it); finally a text whose only number is a grade
    ("The score is 4."). A tagged number outside 1..5, a negative number ("<<Score>>-3"), a
    decimal, or several different numbers give None rather than a guess.
    """
    for pattern in (_SCORE_TAG, _SCORE_CLOSE):
        found = pattern.search(text)
        if found:
            return _grade(found.group(1))
    numbers = set(_ANY_NUMBER.findall(text))
    if len(numbers) == 1:
        return _grade(numbers.pop())
    return None


def grade_from_dict(data: dict[str, Any]) -> RelevanceGrade:
    """A grade as :meth:`RelevanceGrade.to_dict` wrote it into a trace."""
    return RelevanceGrade(data["id"], float(data["expected"]), int(data["argmax"]), dict(data["distribution"]),
                          data["source"], data.get("answer", ""), data.get("readable", True),
                          tuple(data.get("missing", ())))


def parse_leading_grade(text: str) -> int | None:
    """The grade at the very start of an answer (the first-token prompt), or None: "4" and "4. The
    document…" give 4; "<<Score>>4", "Score: 4", "45" or "4.5" give None, since a digit anywhere but
    the first position is not the answer the prompt asked for."""
    found = _LEADING_GRADE.match(text)
    return int(found.group(1)) if found else None


def grade_from_choices(passage_id: str, scores: ChoiceScores) -> RelevanceGrade | None:
    """The expected and argmax grade from next-token scores; None when the next token is not a grade.

    That is when no grade was among the top tokens (the renormalised "distribution" would be a
    uniform placeholder), and when the most probable next token is something else: a server that did
    not continue the prefilled ``<<Score>>`` answers "<<" first, and digits far down its list are
    not the grade the model would write at that position (it comes a few tokens later). Without the
    top tokens (an old cache entry) only the first test can be made.
    """
    if len(scores.missing) == len(GRADES):
        return None
    if scores.raw_top:
        best = max(scores.raw_top, key=lambda token: scores.raw_top[token])
        if normalise_token(best) not in GRADES:
            return None
    distribution = {g: scores.probability(g) for g in GRADES}
    expected = sum(int(g) * p for g, p in distribution.items())
    # max() keeps the first of equal probabilities: a tie goes to the lower, more cautious grade.
    argmax = int(max(GRADES, key=lambda g: distribution[g]))
    return RelevanceGrade(passage_id, expected, argmax, distribution, "logprobs", missing=scores.missing)


def grade_from_text(passage_id: str, text: str,
                    read: Callable[[str], int | None] = parse_score) -> RelevanceGrade:
    grade = read(text)
    value = grade if grade is not None else UNREADABLE_GRADE
    distribution = {g: 1.0 if int(g) == value else 0.0 for g in GRADES}
    return RelevanceGrade(passage_id, float(value), value, distribution, "generated", answer=text,
                          readable=grade is not None)


@dataclass
class GradedRelevanceReranker(ListStage):
    """Scores every candidate with RRR's relevance model σ(q, z) (App. A.2) and ranks by E[σ].

    σ is asked about each question's original query, never the text that retrieved the list: RRR
    scores against q, not the rewrite q_t (§3.1 (i)-(ii), Algorithm 1 line 5). Grades are kept in
    the question's ``grades``; a passage graded before (an earlier RRR round) is not asked again.
    ``against="search_text"`` is the ablation of §5.3 (ii), Table 8 ("Should the relevance of a
    document be assessed in relation to the original query q1 … or the rewrite q_t from which the
    document was retrieved?"): σ(q_t, z), so every passage is asked again in each round, about the
    text that retrieved it. ``memo=False`` also asks about every passage (a final re-ranker on a
    model of its own must not reuse the relevance model's grades).

    ``reorder=False`` records the grades and E[σ] ranks but passes the list on in its order (RRR
    grades R_t and filters it; the union S is ordered by σ at the end). ``prefill=False`` sends
    A.2 without the started answer; its first token is then "<<", so every grade is generated and
    parsed (``max_tokens`` each) instead of read from log-probabilities. ``when_not_continued`` is
    what a backend that does not continue the started answer gets: ``first-token`` (the bare-digit
    variant of A.2, read from log-probabilities) or ``generate`` (A.2 as printed, generated and parsed).
    """

    llm: LLM
    keep: int | None = None  # top-k to keep after ranking; None keeps all
    name: str = "graded"
    template: GradedPromptTemplate = field(default_factory=lambda: graded_prompt("rrr.relevance"))
    prefill: bool = True
    max_tokens: int = 8  # "<<Score>>4<</Score>>" is 8 SmolLM2 tokens; only the fallback generates
    reorder: bool = True
    against: Literal["query", "search_text"] = "query"
    memo: bool = True
    when_not_continued: Literal["first-token", "generate"] = "first-token"
    first_token_template: GradedPromptTemplate = field(
        default_factory=lambda: graded_prompt("rrr.relevance_first_token"))

    def run(self, batch: Sequence[QuestionState]) -> None:
        settings = {"scorer": "expected grade over next-token 1..5 (σ, RRR App. A.2)",
                    "prompt": self.template.name, "prefill": self.template.answer_prefix if self.prefill else "",
                    "keep": self.keep, "fallback_max_tokens": self.max_tokens,
                    **({"when_not_continued": self.when_not_continued} if self.prefill else {}),
                    "against": "original query" if self.against == "query" else "the query that retrieved it",
                    **({} if self.reorder else {"order": "kept as retrieved"})}
        # A grade is reused only when it answers the same question: about q, by this stage's model.
        reuse = self.memo and self.against == "query"
        with recording(batch, self.name, "graded", lambda s: {**settings, **round_settings(s)}) as traces:
            owners = [(i, p) for i, s in enumerate(batch) for p in s.ranked.passages
                      if not (reuse and p.id in s.grades)]
            asked_about = [batch[i].query.text if self.against == "query" else batch[i].search_text
                           for i, _ in owners]
            continues = True
            if self.prefill and owners:
                # Once per backend: a server that does not continue "<<Score>>" gets the first-token prompt.
                found = continuation_support(self.llm, traces[owners[0][0]])
                continues = found.continues
                first = traces[owners[0][0]].details_as(GradedDetails)
                first.probe_calls = found.probe_calls
                for stage in traces:
                    stage.details_as(GradedDetails).continuation = found.how
            grades = self._grade(asked_about, [p for _, p in owners], [traces[i] for i, _ in owners],
                                 continues=continues)

            asked = [0] * len(batch)
            for (i, passage), grade in zip(owners, grades, strict=True):
                batch[i].grades[passage.id] = grade
                asked[i] += 1
            for state, stage, fresh in zip(batch, traces, asked, strict=True):
                mine = [state.grades[p.id] for p in state.ranked.passages]
                details = stage.details_as(GradedDetails)
                details.grades = [g.to_dict() for g in mine]
                details.already_graded = len(mine) - fresh
                details.generated_grades = sum(g.source == "generated" for g in mine)
                details.unreadable_grades = sum(not g.readable for g in mine)
                ranked = state.ranked.ranked_by(self.name, [g.expected for g in mine], keep=self.keep)
                if not self.reorder:
                    rank_of = {c.passage.id: c for c in ranked}
                    ranked = CandidateList(state.query, [rank_of[c.passage.id] for c in state.ranked])
                state.candidates = ranked
                stage.output = ranked.to_dicts()

    def _grade(self, queries: list[str], passages: list[Passage], traces: list[StageTrace], *,
               continues: bool = True) -> list[RelevanceGrade]:
        """One :class:`RelevanceGrade` per (query, passage), in order; each call recorded in its trace.
        ``continues=False`` (a server that does not continue a started turn) asks the first-token
        prompt with no prefill and reads the grade at the first position only, or, with
        ``when_not_continued="generate"``, A.2 as printed, its answer generated and parsed."""
        first_token = self.prefill and not continues and self.when_not_continued == "first-token"
        template = self.first_token_template if first_token else self.template
        prefill = self.prefill and continues
        prompts = []
        for q, p, trace in zip(queries, passages, traces, strict=True):
            fitted = fit_one_passage(self.llm, partial(template.messages, q, prefill=prefill), p,
                                     output_tokens=self.max_tokens, fitted=trace.details.fitted)
            prompts.append(template.messages(q, fitted, prefill=prefill))
        grades: list[RelevanceGrade | None] = [None] * len(prompts)
        if (prefill or first_token) and prompts:
            for i, scores in enumerate(self.llm.choice_scores(prompts, GRADES, stage=traces)):
                grades[i] = grade_from_choices(passages[i].id, scores)
        fallback = [i for i, g in enumerate(grades) if g is None]
        from_text: dict[int, RelevanceGrade] = {}
        if fallback:
            # Stop at the closing tag: the grade is before it, and the rest of the answer is cost.
            generations = self.llm.generate([prompts[i] for i in fallback], stage=[traces[i] for i in fallback],
                                            max_tokens=self.max_tokens, stop=["<</Score>>"])
            read = parse_leading_grade if first_token else parse_score
            for i, generation in zip(fallback, generations, strict=True):
                from_text[i] = grade_from_text(passages[i].id, generation.text, read)
        return [from_text[i] if grade is None else grade for i, grade in enumerate(grades)]


@dataclass
class ThresholdFilter(ListStage):
    """Keep the candidates with σ(q, z) > τ (RRR Algorithm 1 line 6; τ = 1, §4(D)).

    ``use="argmax"`` compares the grade a greedy model would answer, which is the paper's σ (an
    integer; τ = 1 prunes exactly the documents graded 1), read from the question's ``grades``.
    ``use="expected"`` compares E[σ], the ``graded_by`` stage's score; with τ = 1 that prunes only
    documents the model is certain about. Order and scores are kept; dropped candidates are listed,
    with a note saying why, in the filter's details.
    """

    tau: float = 1.0
    graded_by: str = "graded"
    use: Literal["argmax", "expected"] = "argmax"
    name: str = "threshold"

    def run(self, batch: Sequence[QuestionState]) -> None:
        settings = {"tau": self.tau, "sigma": self.use, "graded_by": self.graded_by,
                    "rule": "keep σ > τ (RRR Algorithm 1 line 6)"}
        with recording(batch, self.name, "threshold", lambda s: {**settings, **round_settings(s)}) as traces:
            for state, stage in zip(batch, traces, strict=True):
                kept: list[Candidate] = []
                dropped: list[Candidate] = []
                for candidate in state.ranked:
                    sigma = self._sigma(candidate, state)
                    if sigma > self.tau:
                        kept.append(candidate)
                    else:
                        note = f"dropped by {self.name}: σ ({self.use}) = {sigma:g} ≤ τ = {self.tau:g}"
                        dropped.append(Candidate(candidate.passage, list(candidate.scores), note))
                details = stage.details_as(FilterDetails)
                details.tau = self.tau
                details.dropped = [{k: v for k, v in c.to_dict().items() if k != "text"} for c in dropped]
                details.kept = len(kept)
                state.candidates = CandidateList(state.query, kept)
                stage.output = state.ranked.to_dicts()

    def _sigma(self, candidate: Candidate, state: QuestionState) -> float:
        if self.use == "expected":
            score = candidate.score_of(self.graded_by)
        else:
            grade = state.grades.get(candidate.passage.id)
            score = None if grade is None else float(grade.argmax)
        if score is None:
            raise ValueError(f"candidate {candidate.passage.id!r} has no grade from stage {self.graded_by!r}; "
                             "run GradedRelevanceReranker on the list before the threshold filter")
        return score


def threshold_filter(candidates: CandidateList, state_or_trace: QuestionState | Trace | None = None, *,
                     tau: float = 1.0, graded_by: str = "graded", use: Literal["argmax", "expected"] = "argmax",
                     name: str = "threshold") -> CandidateList:
    """:class:`ThresholdFilter` over one list. With ``use="argmax"`` the grades come from the
    question state that graded it, or from the grading stage's record in the trace given."""
    stage = ThresholdFilter(tau=tau, graded_by=graded_by, use=use, name=name)
    if isinstance(state_or_trace, QuestionState):
        state = state_or_trace
        state.candidates = candidates
    else:
        # A list ranked on its own: its grades are in the trace, in the grading stage's details.
        state = QuestionState(candidates.query, state_or_trace or Trace(), candidates)
        for recorded in state.trace.stages:
            if recorded.name == graded_by and isinstance(recorded.details, GradedDetails):
                state.grades.update({g["id"]: grade_from_dict(g) for g in recorded.details.grades})
    stage.run([state])
    return state.ranked
