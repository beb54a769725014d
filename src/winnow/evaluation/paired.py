"""Paired comparison of two runs on the same questions: is a method's gain over plain RAG real?

Benchmarks of this field report mean accuracy per method (RankRAG Table 2, MAIN-RAG Table 1), but
on the few hundred questions a CPU can afford, a gain of a few points is often within noise. Every
question is answered by both runs, so the comparison is paired:

- wins / losses / ties count the questions where the method scored above / below / equal to the
  reference;
- the p-value is the exact two-sided sign test on wins against losses (for 0/1 scores such as
  accuracy and EM this is McNemar's exact test), so ties carry no evidence either way;
- the interval is a paired bootstrap 95% percentile interval of the mean difference (resampling
  questions, fixed seed, so a report is reproducible).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import comb

import numpy as np


@dataclass(frozen=True)
class PairedDifference:
    """``other − reference`` on one metric over the questions both runs answered."""

    questions: int
    wins: int
    losses: int
    ties: int
    mean_difference: float
    low: float  # bootstrap 95% interval of the mean difference
    high: float
    p_value: float  # exact two-sided sign test on wins against losses


def sign_test_p(wins: int, losses: int) -> float:
    """Exact two-sided binomial test of ``wins`` against ``losses`` with probability one half."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(comb(n, i) for i in range(min(wins, losses) + 1))
    outcomes: int = 2**n  # typeshed types int ** int as Any (a negative power is a float)
    return min(1.0, 2 * tail / outcomes)


def bootstrap_interval(differences: Sequence[float], rounds: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile 95% interval of the mean of ``differences``, resampling with replacement."""
    values = np.asarray(differences, dtype=float)
    if len(values) == 0:
        return (0.0, 0.0)
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(rounds, len(values)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def paired_difference(reference: Sequence[float], other: Sequence[float], *, rounds: int = 2000,
                      seed: int = 0) -> PairedDifference:
    """Compare per-question scores given in the same question order."""
    if len(reference) != len(other):
        raise ValueError(f"paired scores need the same questions: {len(reference)} against {len(other)}")
    differences = [b - a for a, b in zip(reference, other, strict=True)]
    wins = sum(d > 0 for d in differences)
    losses = sum(d < 0 for d in differences)
    low, high = bootstrap_interval(differences, rounds=rounds, seed=seed)
    mean = sum(differences) / len(differences) if differences else 0.0
    return PairedDifference(len(differences), wins, losses, len(differences) - wins - losses, mean, low, high,
                            sign_test_p(wins, losses))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment (Holm 1979) of ``p_values``, in their order: the i-th smallest is
    multiplied by (m − i + 1), made monotone non-decreasing in that order, and capped at 1. It keeps
    the chance of any false "gain" among m comparisons at the level, where m unadjusted tests would not."""
    m = len(p_values)
    adjusted = [0.0] * m
    running = 0.0
    for rank, index in enumerate(sorted(range(m), key=lambda i: p_values[i])):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted
