"""RRR's graded relevance model σ(q, z) ∈ {1..5} (Appendix A.2) and the τ filter (Algorithm 1 line 6)."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from winnow.errors import WinnowError
from winnow.llm import LLM
from winnow.llm.base import ChoiceScores, Generation
from winnow.llm.choices import scores_over_choices
from winnow.prompts import graded_prompt, prompt
from winnow.records import Candidate, CandidateList, Passage, Query, StageScore, Trace
from winnow.stages import GradedRelevanceReranker, graded, parse_score, threshold_filter
from winnow.stages.graded import GRADES

# RRR Appendix A.2 as printed, with the query and document filled in.
PAPER_A2 = (
    "system:\n"
    "You are an AI assistant that helps people find information.\n"
    "user:\n"
    "Given a QUERY and a DOCUMENT, score the DOCUMENT on a scale of 1(least relevant to QUERY) to "
    "5(most relevant to QUERY).\n"
    "Enclose the answer in <<Score>><</Score>>. For instance if you think the score should be 4, then "
    "answer <<Score>>4<</Score>>. Do not give any explanation.\n"
    "QUERY: {query} DOCUMENT: {document}"
)

TEXTS = [
    "Hamlet is a tragedy written by William Shakespeare around 1600.",
    "The Eiffel Tower is a wrought-iron lattice tower in Paris.",
    "Shakespeare was an English playwright, poet and actor.",
    "Photosynthesis converts light energy into chemical energy in plants.",
]


def candidate_list(texts=TEXTS, query="who wrote hamlet") -> CandidateList:
    return CandidateList(Query(query), [
        Candidate(Passage(f"d{i}", text), [StageScore("bm25", 10.0 - i, i + 1)]) for i, text in enumerate(texts)])


# --- parse_score -------------------------------------------------------------------------------

@pytest.mark.parametrize("text, grade", [
    ("<<Score>>4<</Score>>", 4),
    ("<<Score>> 5 <</Score>>", 5),
    ("<<score>>2<</score>>", 2),
    ("<<Score>>1", 1),  # closing tag cut by the stop sequence
    ("3<</Score>>", 3),  # a server that continued the prefill without echoing it
    ("Sure. <<Score>>2<</Score>> because the document mentions it 7 times", 2),
    ("The score is 4.", 4),
    ("5", 5),
    ("<<Score>>7<</Score>>", None),  # tagged but out of range: no guess from other numbers
    ("<<Score>>0<</Score>> 3", None),
    ("<<Score>>4.5<</Score>>", None),
    ("on a scale of 1 to 5 I would say", None),  # two different numbers
    ("The score for the QUERY is", None),
    ("", None),
    ("²", None),  # isdigit() but not a decimal digit
    ("<<Score>>" + "9" * 5000, None),  # longer than int() accepts by default
])
def test_parse_score_hand_cases(text, grade):
    assert parse_score(text) == grade


@given(st.text())
def test_parse_score_never_crashes_and_gives_a_grade_or_none(text):
    assert parse_score(text) in {None, 1, 2, 3, 4, 5}


@given(st.text(alphabet="<>/Score 0123456789.\n"))
def test_parse_score_on_tag_like_text_gives_a_grade_or_none(text):
    assert parse_score(text) in {None, 1, 2, 3, 4, 5}


@given(st.integers(1, 5), st.text(alphabet="abc .,\n"), st.text(alphabet="abc .,\n0123456789"))
def test_parse_score_reads_the_tagged_grade_whatever_surrounds_it(grade, before, after):
    assert parse_score(f"{before}<<Score>>{grade}<</Score>>{after}") == grade


# The close-tag pattern as it was before it was made linear (kept here as the reference behaviour).
_BACKTRACKING_CLOSE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*<<\s*/\s*score\s*>>", re.IGNORECASE)


def parse_score_as_before(text):
    """parse_score with the backtracking close-tag pattern, the rest unchanged."""
    for pattern in (graded._SCORE_TAG, _BACKTRACKING_CLOSE):
        if found := pattern.search(text):
            return graded._grade(found.group(1))
    numbers = set(graded._ANY_NUMBER.findall(text))
    return graded._grade(numbers.pop()) if len(numbers) == 1 else None


@given(st.text(alphabet="<>/Score 0123456789.\n\t", max_size=80))
def test_parse_score_reads_what_the_backtracking_pattern_read(text):
    assert parse_score(text) == parse_score_as_before(text)


@given(st.lists(st.sampled_from(["<<Score>>", "<</Score>>", "<< / score >>", "3", "12", "4.5", ".", " ", "x"]),
                max_size=12))
def test_parse_score_reads_what_the_backtracking_pattern_read_on_tag_pieces(pieces):
    text = "".join(pieces)
    assert parse_score(text) == parse_score_as_before(text)


@pytest.mark.parametrize("text", ["9" * 1_000_000, "9" * 1_000_000 + "<</Score>>", "1." * 500_000 + "<</Score>>"])
def test_parse_score_reads_a_million_digits(text):
    # The backtracking pattern retried from every digit of the run: 16,000 digits took 7.5 s, a million
    # would take hours. Now each character is looked at a bounded number of times.
    assert parse_score(text) is None


# --- the A.2 prompt ---------------------------------------------------------------------------

def test_relevance_prompt_matches_appendix_a2():
    passage = Passage(id="x", text="Hamlet is a tragedy by William Shakespeare.")
    rendered = graded_prompt("rrr.relevance").render_plain("who wrote hamlet", passage)
    assert rendered == PAPER_A2.format(query="who wrote hamlet", document=passage.text)


def test_relevance_prompt_prefills_the_answer_tag_so_the_grade_is_the_next_token():
    template = graded_prompt("rrr.relevance")
    passage = Passage(id="x", title="Hamlet", text="A tragedy.")
    messages = template.messages("who wrote hamlet", passage)
    assert [m["role"] for m in messages] == ["system", "user", "assistant"]
    assert messages[-1]["content"] == "<<Score>>"
    assert messages[1]["content"].endswith("QUERY: who wrote hamlet DOCUMENT: Hamlet\nA tragedy.")
    assert template.messages("who wrote hamlet", passage, prefill=False) == messages[:2]


def test_graded_and_passage_templates_are_loaded_by_their_own_function():
    with pytest.raises(WinnowError, match="graded_prompt"):
        prompt("rrr.relevance")


# --- the stage with a scripted model ----------------------------------------------------------

class ScriptedBackend:
    """Answers by passage: next-token top log-probabilities and a generated text for each."""

    batch_size = 8

    def __init__(self, top_by_text: dict[str, list[tuple[str, float]]], answer_by_text: dict[str, str] | None = None):
        self.top_by_text = top_by_text
        self.answer_by_text = answer_by_text or {}
        self.requests: list[tuple[str, list[dict[str, str]]]] = []

    @property
    def identity(self):
        return {"backend": "scripted"}

    def _text(self, messages):
        return next(t for t in self.top_by_text if t in messages[1]["content"])

    def choice_logprobs(self, prompts, choices):
        out = []
        for messages in prompts:
            self.requests.append(("choices", messages))
            logprobs, missing = scores_over_choices(self.top_by_text[self._text(messages)], choices)
            out.append(ChoiceScores(logprobs, 100, 0.0, missing))
        return out

    def generate(self, prompts, *, max_tokens, temperature=0.0, stop=()):
        self.requests.extend(("generate", messages) for messages in prompts)
        return [Generation(self.answer_by_text.get(self._text(m), ""), 100, 3, 0.0) for m in prompts]

    def close(self):
        pass


def peaked(grade: str, p: float = 0.9) -> list[tuple[str, float]]:
    rest = (1 - p) / 4
    return [(g, math.log(p if g == grade else rest)) for g in GRADES]


def test_score_is_the_expected_grade_and_the_trace_has_argmax_and_distribution():
    top = {TEXTS[0]: [("5", math.log(0.5)), ("4", math.log(0.5)), ("<", math.log(1e-9))],
           TEXTS[1]: peaked("1"), TEXTS[2]: peaked("3"), TEXTS[3]: peaked("2")}
    trace = Trace()
    ranked = GradedRelevanceReranker(LLM(ScriptedBackend(top))).rank(candidate_list(), trace)
    assert [c.passage.id for c in ranked] == ["d0", "d2", "d3", "d1"]
    # 0.5·5 + 0.5·4; "1".."3" are missing from the top tokens and get the lowest seen, 1e-9.
    assert ranked.candidates[0].score == pytest.approx(4.5)
    grades = {g["id"]: g for g in trace.stages[0].details.grades}
    assert grades["d0"]["argmax"] == 4  # a tie goes to the lower grade
    assert grades["d0"]["missing"] == ["1", "2", "3"]
    assert grades["d2"]["argmax"] == 3 and grades["d2"]["source"] == "logprobs"
    assert sum(grades["d2"]["distribution"].values()) == pytest.approx(1.0)
    assert grades["d2"]["expected"] == pytest.approx(1 * .025 + 2 * .025 + 3 * .9 + 4 * .025 + 5 * .025)


def test_unusable_logprobs_fall_back_to_generating_and_parsing():
    top = {TEXTS[0]: [("<<", -0.1), ("The", -2.0)], TEXTS[1]: peaked("2"),
           TEXTS[2]: [("Sure", -0.2)], TEXTS[3]: peaked("4")}
    answers = {TEXTS[0]: "<<Score>>5", TEXTS[2]: "I cannot tell"}
    backend = ScriptedBackend(top, answers)
    trace = Trace()
    ranked = GradedRelevanceReranker(LLM(backend)).rank(candidate_list(), trace)
    stage = trace.stages[0]
    assert [kind for kind, _ in backend.requests] == ["choices"] * 4 + ["generate", "generate"]
    assert len(stage.llm_calls) == 6
    grades = {g["id"]: g for g in stage.details.grades}
    assert grades["d0"] | {"distribution": None} == {
        "id": "d0", "expected": 5.0, "argmax": 5, "distribution": None, "source": "generated",
        "answer": "<<Score>>5", "readable": True}
    assert grades["d2"]["readable"] is False and grades["d2"]["argmax"] == 1
    assert stage.details.generated_grades == 2 and stage.details.unreadable_grades == 1
    assert [c.passage.id for c in ranked] == ["d0", "d3", "d1", "d2"]


def test_without_prefill_every_grade_is_generated():
    backend = ScriptedBackend({t: peaked("3") for t in TEXTS}, {t: "<<Score>>3<</Score>>" for t in TEXTS})
    trace = Trace()
    GradedRelevanceReranker(LLM(backend), prefill=False).rank(candidate_list(), trace)
    assert [kind for kind, _ in backend.requests] == ["generate"] * 4
    assert all(messages[-1]["role"] == "user" for _, messages in backend.requests)
    assert {g["argmax"] for g in trace.stages[0].details.grades} == {3}


def test_keep_cuts_the_ranked_list():
    top = {t: peaked(g) for t, g in zip(TEXTS, "2453")}
    ranked = GradedRelevanceReranker(LLM(ScriptedBackend(top)), keep=2).rank(candidate_list(), Trace())
    assert [c.passage.id for c in ranked] == ["d2", "d1"]


# --- threshold_filter --------------------------------------------------------------------------

def graded_run(grades: str):
    top = {t: peaked(g) for t, g in zip(TEXTS, grades)}
    trace = Trace()
    ranked = GradedRelevanceReranker(LLM(ScriptedBackend(top))).rank(candidate_list(), trace)
    return ranked, trace


def test_threshold_prunes_the_lowest_grade_keeps_order_and_notes_the_dropped():
    ranked, trace = graded_run("1413")
    kept = threshold_filter(ranked, trace)
    assert [c.passage.id for c in kept] == ["d1", "d3"]  # graded order, σ = 4 then 3
    assert [c.score for c in kept] == [c.score for c in ranked][:2]
    stage = trace.stages[-1]
    assert stage.name == "threshold" and stage.settings["tau"] == 1.0
    assert [d["id"] for d in stage.details.dropped] == ["d0", "d2"]
    assert stage.details.dropped[0]["note"] == "dropped by threshold: σ (argmax) = 1 ≤ τ = 1"
    assert "text" not in stage.details.dropped[0]


def test_threshold_on_the_expected_grade_and_a_higher_tau():
    ranked, trace = graded_run("1413")
    assert [c.passage.id for c in threshold_filter(ranked, trace, tau=3)] == ["d1"]
    # E[σ] of a grade-1 peak is 0.9·1 + 0.025·(2+3+4+5) = 1.25 > 1: the expected grade rarely prunes.
    assert len(threshold_filter(ranked, trace, use="expected")) == 4


def test_threshold_without_grades_says_which_stage_is_missing():
    with pytest.raises(ValueError, match="no grade from stage 'graded'"):
        threshold_filter(candidate_list(), Trace())


# --- the real model (SmolLM2-135M through llama.cpp) -------------------------------------------

@pytest.mark.llm
def test_llama_cpp_continues_a_prefilled_assistant_turn(llama_backend):
    """xllamacpp's server continues a final assistant message ("prefill assistant", on by default):
    the chat template leaves the turn open, so the next token follows "<<Score>>" directly."""
    template = graded_prompt("rrr.relevance")
    passage = Passage(id="x", text=TEXTS[0])
    plain, prefilled = (template.messages("who wrote hamlet", passage, prefill=p) for p in (False, True))
    [plain_scores, prefilled_scores] = llama_backend.choice_logprobs([plain, prefilled], GRADES)
    # "<<Score>>" is 3 SmolLM2 tokens; closing the turn and opening a new one would add 5 more.
    assert prefilled_scores.prompt_tokens - plain_scores.prompt_tokens == 3
    assert prefilled_scores.missing == ()
    # llama.cpp returns the prefilled text as the start of the answer.
    [generation] = llama_backend.generate([prefilled], max_tokens=6)
    assert generation.text.startswith("<<Score>>")
    assert parse_score(generation.text) in {1, 2, 3, 4, 5}


@pytest.mark.llm
def test_graded_reranker_with_the_real_model(llm):
    candidates = candidate_list()
    trace = Trace()
    ranked = GradedRelevanceReranker(llm).rank(candidates, trace)
    stage = trace.stages[0]
    assert sorted(c.passage.id for c in ranked) == sorted(c.passage.id for c in candidates)
    assert all(1.0 <= c.score <= 5.0 for c in ranked)
    assert [c.score for c in ranked] == sorted((c.score for c in ranked), reverse=True)
    assert [c.rank_of("graded") for c in ranked] == [1, 2, 3, 4]
    assert all(c.scores[0].stage == "bm25" for c in ranked)
    assert len(stage.llm_calls) == len(candidates) and {c.kind for c in stage.llm_calls} == {"choices"}
    assert stage.usage.calls == len(candidates)
    for grade in stage.details.grades:
        assert grade["source"] == "logprobs" and grade["argmax"] in range(1, 6)
        assert sum(grade["distribution"].values()) == pytest.approx(1.0, abs=1e-4)
    assert stage.details.generated_grades == 0
    # Every σ call is cached (RRR App. B's call database): a second run asks the model nothing.
    again = Trace()
    GradedRelevanceReranker(llm).rank(candidates, again)
    assert again.stages[0].usage.cache_hits == len(candidates) and again.stages[0].usage.calls == 0


@pytest.mark.llm
def test_graded_reranker_generating_with_the_real_model(llm):
    trace = Trace()
    ranked = GradedRelevanceReranker(llm, prefill=False).rank(candidate_list(TEXTS[:2]), trace)
    stage = trace.stages[0]
    assert len(stage.llm_calls) == 2 and {c.kind for c in stage.llm_calls} == {"generate"}
    assert all(1.0 <= c.score <= 5.0 for c in ranked)
    assert all(g["source"] == "generated" for g in stage.details.grades)
