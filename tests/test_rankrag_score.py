"""RankRAG's relevance score (issue 29, item 6): P("True") renormalised over {True, False}, Winnow's
default, or as generated (``score=raw``), which is what §4.3 describes ("the probability of generating
the answer as True") and what ``--profile paper`` sets."""

from __future__ import annotations

import math

import pytest

from winnow.llm import LLM
from winnow.llm.base import ChoiceScores, Generation
from winnow.llm.choices import raw_choice_logprobs, scores_over_choices
from winnow.llm.openai_format import read_choice_scores
from winnow.methods import method_settings
from winnow.records import Candidate, CandidateList, Passage, Query, StageScore, Trace
from winnow.settings import SettingError
from winnow.stages import PointwiseTrueReranker
from winnow.stages.pointwise import true_score

# Passage A: the model says True 30%, False 5% (the rest elsewhere); passage B: True 60%, False 40%.
TOPS = {"A": [("True", math.log(0.30)), ("False", math.log(0.05)), ("The", math.log(0.65))],
        "B": [(" True", math.log(0.35)), ("true", math.log(0.25)), ("False", math.log(0.40))]}


def choice_scores(top):
    logprobs, missing = scores_over_choices(top, ("True", "False"))
    return ChoiceScores(logprobs, 10, 0.0, missing, raw_top=dict(top),
                        raw_logprobs=raw_choice_logprobs(top, ("True", "False"))[0])


def test_raw_and_renormalised_p_true_hand_computed():
    a, b = choice_scores(TOPS["A"]), choice_scores(TOPS["B"])
    assert true_score(a) == pytest.approx(0.30 / 0.35) and true_score(b) == pytest.approx(0.60)
    assert true_score(a, "raw") == pytest.approx(0.30)
    assert true_score(b, "raw") == pytest.approx(0.60)  # the spellings " True" and "true" add up
    # A cache entry written before the raw values were kept: the same sum from its top tokens.
    old = ChoiceScores(b.logprobs, 10, 0.0, (), raw_top=dict(TOPS["B"]))
    assert true_score(old, "raw") == pytest.approx(0.60)


def test_a_server_answer_carries_the_raw_log_probabilities():
    top = [{"token": "True", "logprob": math.log(0.3)}, {"token": "False", "logprob": math.log(0.05)}]
    body = {"choices": [{"logprobs": {"content": [{"token": "True", "logprob": math.log(0.3), "top_logprobs": top}]}}]}
    scores = read_choice_scores(body, ("True", "False"), 0.1, "s")
    assert math.exp(scores.raw_logprobs["True"]) == pytest.approx(0.3)
    assert scores.probability("True") == pytest.approx(0.3 / 0.35)


class Scripted:
    batch_size = 8
    identity = {"backend": "scripted"}

    def choice_logprobs(self, prompts, choices):
        return [choice_scores(TOPS["A" if "Alpha" in str(p) else "B"]) for p in prompts]

    def generate(self, prompts, *, max_tokens, temperature=0.0, stop=()):
        return [Generation("x", 1, 1, 0.0) for _ in prompts]

    def close(self):
        pass


@pytest.mark.parametrize("score, order", [("renormalised", ["a", "b"]), ("raw", ["b", "a"])])
def test_the_setting_changes_the_order(score, order):
    candidates = CandidateList(Query("q"), [Candidate(Passage("a", "Alpha text"), [StageScore("bm25", 2.0, 1)]),
                                            Candidate(Passage("b", "Beta text"), [StageScore("bm25", 1.0, 2)])])
    trace = Trace()
    ranked = PointwiseTrueReranker(LLM(Scripted()), score=score).rank(candidates, trace)
    assert [c.passage.id for c in ranked] == order
    assert ("renormalised" in trace.stages[0].settings["scorer"]) == (score == "renormalised")


def test_the_paper_profile_scores_as_generated():
    assert method_settings("rankrag").score == "renormalised"
    assert method_settings("rankrag", profile="paper").score == "raw"
    assert method_settings("rankrag", profile="paper", score="renormalised").score == "renormalised"
    with pytest.raises(SettingError, match="score"):
        method_settings("rankrag", score="softmax")
