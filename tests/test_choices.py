"""Choice scoring from top next-token log-probabilities."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from winnow.llm.choices import logsumexp, scores_over_choices


def probs(scores):
    return {c: math.exp(v) for c, v in scores.items()}


def test_renormalises_over_the_choices():
    scores, missing = scores_over_choices([("True", math.log(0.6)), ("No", math.log(0.2)),
                                           ("False", math.log(0.2))], ["True", "False"])
    assert probs(scores) == pytest.approx({"True": 0.75, "False": 0.25})
    assert missing == ()


def test_variants_with_space_and_case_are_added_together():
    top = [(" True", math.log(0.3)), ("True", math.log(0.1)), ("true", math.log(0.1)),
           ("▁False", math.log(0.25)), ("ĠFALSE", math.log(0.25))]
    scores, _ = scores_over_choices(top, ["True", "False"])
    assert probs(scores) == pytest.approx({"True": 0.5, "False": 0.5})


def test_missing_choice_gets_the_lowest_seen_logprob():
    top = [("True", math.log(0.9)), ("The", math.log(0.05)), ("A", math.log(0.01))]
    scores, missing = scores_over_choices(top, ["True", "False"])
    assert missing == ("False",)
    assert probs(scores)["False"] == pytest.approx(0.01 / 0.91)


def test_choices_that_collide_after_folding_are_refused():
    with pytest.raises(ValueError):
        scores_over_choices([("yes", 0.0)], ["Yes", "yes"])


def test_logsumexp_of_nothing_is_minus_infinity():
    assert logsumexp([]) == -math.inf


tokens = st.text(min_size=0, max_size=6)
logprob = st.floats(min_value=-50, max_value=0, allow_nan=False)


@given(st.lists(st.tuples(tokens, logprob), max_size=30),
       st.sampled_from([("True", "False"), ("Yes", "No"), ("1", "2", "3", "4", "5")]))
def test_scores_always_form_a_distribution(top, choices):
    scores, missing = scores_over_choices(top, choices)
    assert set(scores) == set(choices)
    assert sum(probs(scores).values()) == pytest.approx(1.0)
    assert set(missing) <= set(choices)
