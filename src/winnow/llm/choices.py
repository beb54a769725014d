"""Turning a model's top next-token log-probabilities into scores over a closed set of choices.

Tokenisers spell the same word several ways: "True", " True", "true", "TRUE". Every variant whose
stripped, case-folded text equals a choice counts towards that choice (their probabilities are
added), then the choices are renormalised so their probabilities sum to one, as RankRAG does for
True/False (§4.3).
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence


def logsumexp(values: Iterable[float]) -> float:
    values = list(values)
    if not values:
        return -math.inf
    peak = max(values)
    if peak == -math.inf:
        return -math.inf
    return peak + math.log(sum(math.exp(v - peak) for v in values))


def normalise_token(token: str) -> str:
    # SentencePiece marks a leading space with "▁", GPT-2 style BPE with "Ġ".
    return token.replace("▁", " ").replace("Ġ", " ").strip().casefold()


def raw_choice_logprobs(top: Sequence[tuple[str, float]], choices: Sequence[str]
                        ) -> tuple[dict[str, float], tuple[str, ...]]:
    """Each choice's log-probability as the model gave it (its spellings' probabilities added), not
    renormalised, and the choices missing from ``top`` (given the lowest log-probability seen)."""
    if not choices:
        raise ValueError("at least one choice is needed")
    wanted = {normalise_token(c): c for c in choices}
    if len(wanted) != len(choices):
        raise ValueError(f"choices must differ after case-folding and stripping: {list(choices)}")
    found: dict[str, list[float]] = {c: [] for c in choices}
    for token, logprob in top:
        choice = wanted.get(normalise_token(token))
        if choice is not None:
            found[choice].append(logprob)
    floor = min((lp for _, lp in top), default=0.0)
    missing = tuple(c for c in choices if not found[c])
    return {c: (logsumexp(found[c]) if found[c] else floor) for c in choices}, missing


def scores_over_choices(top: Sequence[tuple[str, float]], choices: Sequence[str]
                        ) -> tuple[dict[str, float], tuple[str, ...]]:
    """Renormalised log-probabilities of ``choices`` from ``top`` (token, logprob) pairs.

    Returns the scores and the choices that did not appear among ``top``. A missing choice is
    given the lowest log-probability in ``top`` (its true value can only be lower), so a model
    that never considers "False" still yields a finite, conservative P("True").
    """
    raw, missing = raw_choice_logprobs(top, choices)
    best = max(raw.values())
    if best == -math.inf:  # every choice impossible: fall back to uniform rather than NaN
        uniform = -math.log(len(choices))
        return {c: uniform for c in choices}, missing
    # Shifted by the largest first: at -1e32, adding log 2 is lost to rounding and two equal
    # choices would each come out at probability 1.
    shifted = {c: raw[c] - best for c in choices}
    total = logsumexp(shifted.values())
    return {c: shifted[c] - total for c in choices}, missing
