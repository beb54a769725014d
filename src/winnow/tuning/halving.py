"""Successive halving over question subsets, for two objectives (quality up, cost down).

The tuning questions, in their seeded order, are cut into rungs of growing size: with η = 3 and 60
questions, the first 7, 20, then all 60 (Jamieson & Talwalkar 2016; Li et al. 2018, Hyperband's
inner loop). A bracket of configurations is measured on the first rung; a configuration goes on to
the next rung's questions only if

1. it can still reach the Pareto front: no configuration measured on the same questions (in any
   bracket of the study) costs no more and leads it, question by question, by more than one
   standard error of the paired difference (so a configuration is dropped only when a rival is
   clearly better at no greater cost, not on a lucky question or two), and
2. it is among the best 1/η of its bracket by Pareto rank (then quality): the halving that bounds
   the calls spent.

Only configurations that reach the last rung are measured on every tuning question and can be on
the front the report shows. The reference (vanilla) is always carried to the last rung.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: How many standard errors a rival's paired lead must exceed to drop a configuration (one-sided, ~84%).
LEAD_STANDARD_ERRORS = 1.0


def rung_sizes(questions: int, eta: int, smallest: int) -> list[int]:
    """The questions of each rung, growing by ``eta`` to all ``questions``; the first holds at least
    ``smallest`` (or all of them, when there are fewer)."""
    if questions <= 0:
        return []
    sizes = [questions]
    while math.ceil(sizes[0] / eta) >= smallest and math.ceil(sizes[0] / eta) < sizes[0]:
        sizes.insert(0, math.ceil(sizes[0] / eta))
    return sizes


@dataclass(frozen=True)
class Point:
    """One configuration measured on the same questions as its rivals: per-question quality and its mean cost."""

    key: int  # the trial's number
    quality: tuple[float, ...]
    cost: float

    @property
    def mean_quality(self) -> float:
        return sum(self.quality) / len(self.quality) if self.quality else 0.0


def dominates(a: Point, b: Point) -> bool:
    """``a`` is at least as good as ``b`` on both objectives and better on one (point estimates)."""
    return (a.mean_quality >= b.mean_quality and a.cost <= b.cost
            and (a.mean_quality > b.mean_quality or a.cost < b.cost))


def pareto_front(points: Sequence[Point]) -> list[Point]:
    """The points no other point dominates, cheapest first."""
    front = [p for p in points if not any(dominates(q, p) for q in points if q is not p)]
    return sorted(front, key=lambda p: (p.cost, -p.mean_quality, p.key))


def pareto_ranks(points: Sequence[Point]) -> dict[int, int]:
    """Each point's non-domination rank: 0 for the front, 1 for the front of the rest, …"""
    ranks: dict[int, int] = {}
    left = list(points)
    rank = 0
    while left:
        front = [p for p in left if not any(dominates(q, p) for q in left if q is not p)]
        ranks.update({p.key: rank for p in front})
        left = [p for p in left if p.key not in ranks]
        rank += 1
    return ranks


def clearly_better(rival: Point, point: Point) -> bool:
    """``rival`` costs no more than ``point`` and leads it, question by question, by more than
    :data:`LEAD_STANDARD_ERRORS` standard errors of the mean paired difference."""
    if rival.cost > point.cost or len(rival.quality) != len(point.quality) or not point.quality:
        return False
    differences = [r - p for r, p in zip(rival.quality, point.quality, strict=True)]
    count = len(differences)
    lead = sum(differences) / count
    variance = sum((d - lead) ** 2 for d in differences) / max(count - 1, 1)
    # At least one question's worth of doubt: identical scores on a handful of questions prove little.
    error = max(math.sqrt(variance / count), 1.0 / count)
    return lead > LEAD_STANDARD_ERRORS * error


def can_reach_front(point: Point, rivals: Sequence[Point]) -> bool:
    """No rival on the same questions is :func:`clearly_better`."""
    return not any(clearly_better(rival, point) for rival in rivals if rival.key != point.key)


def promoted(bracket: Sequence[Point], rivals: Sequence[Point], eta: int, *, always: Sequence[int] = ()) -> list[int]:
    """The keys of ``bracket`` that go on to the next rung (see the module notes); ``always`` (the
    reference) go on whatever they score and take no place of the others."""
    contenders = [p for p in bracket if p.key not in always]
    places = max(1, len(contenders) // eta) if contenders else 0
    ranks = pareto_ranks(contenders)
    reachable = [p for p in contenders if can_reach_front(p, rivals)]
    reachable.sort(key=lambda p: (ranks[p.key], -p.mean_quality, p.cost, p.key))
    return [p.key for p in bracket if p.key in always] + [p.key for p in reachable[:places]]
