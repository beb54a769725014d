"""What ``winnow tune`` found, said honestly: the confirming-part gain over vanilla first.

The configurations were chosen on the tuning questions, so their tuning scores are optimistic (the
winner's curse of any search). The report therefore leads with the best configuration's gain over
vanilla, with the same model, re-measured on the confirming questions that played no part in the
choice, with the paired bootstrap interval and sign test of :mod:`winnow.evaluation.paired`; when
vanilla is on the front or is the best, that comes first. Then the front (quality against cost, as
measured on the tuning questions, with each chosen configuration's confirming figures), and what
the search spent: calls made against the calls a full evaluation of the same configurations on every
tuning question would have made without the call cache.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..evaluation.paired import PairedDifference, paired_difference
from .configuration import Configuration
from .halving import Point, pareto_front
from .measure import Measured, joined
from .objectives import Objective, cost_unit, shown_cost
from .study import TuneStudy, rung_results


@dataclass
class Row:
    """A configuration measured on every tuning question, with its confirming figures if it was chosen."""

    number: int
    configuration: Configuration
    tuning: Measured
    on_front: bool = False
    reference: bool = False
    confirming: Measured | None = None
    difference: PairedDifference | None = None  # confirming quality − vanilla's, question by question

    @property
    def label(self) -> str:
        return self.configuration.label()

    @property
    def quality(self) -> float:
        return _mean(self.tuning.quality)

    @property
    def cost(self) -> float:
        return _mean(self.tuning.cost)


@dataclass
class Spending:
    """What the search spent, and what a full evaluation of the same configurations would have."""

    configurations: int = 0  # distinct configurations measured on at least one rung
    calls_made: int = 0  # tuning calls sent to the model (cache misses)
    calls_asked: int = 0  # tuning calls asked, the call cache's answers included (halving without the cache)
    full_grid_calls: float = 0.0  # those configurations on every tuning question, without the call cache
    estimated: int = 0  # configurations whose full count is extrapolated from the questions they were asked
    confirming_calls: int = 0
    tokens: int = 0  # tuning and confirming tokens sent
    seconds: float = 0.0  # wall time of every run of the study

    @property
    def share(self) -> float:
        return self.calls_made / self.full_grid_calls if self.full_grid_calls else 0.0


@dataclass
class TuneReport:
    objective: Objective
    cost: str
    model: str
    tuning_questions: int
    confirming_questions: int
    rungs: list[int]
    rows: list[Row]
    counts: dict[str, int] = field(default_factory=dict)
    spending: Spending = field(default_factory=Spending)

    @property
    def reference(self) -> Row | None:
        return next((row for row in self.rows if row.reference), None)

    @property
    def front(self) -> list[Row]:
        return sorted((row for row in self.rows if row.on_front), key=lambda r: (r.cost, -r.quality))

    @property
    def chosen(self) -> list[Row]:
        """The confirmed configurations, best tuning quality first."""
        return sorted((row for row in self.rows if row.confirming is not None), key=lambda r: (-r.quality, r.cost))

    @property
    def best(self) -> Row | None:
        """The front's best by tuning quality (the cheaper of two equal): the configuration the search chose."""
        front = sorted(self.front, key=lambda r: (-r.quality, r.cost, r.number))
        return front[0] if front else None

    def lead(self) -> list[str]:
        """The report's first lines (see the module notes)."""
        best, reference = self.best, self.reference
        if best is None or reference is None:
            return ["No configuration has been measured on every tuning question yet: run `winnow tune` again "
                    "to continue the study."]
        name = self.objective.name
        lines = []
        if best is reference:
            tried = self.counts.get("configurations", 0)
            lines.append(f"Vanilla is the best configuration: none of the {tried} configurations tried beat "
                         f"vanilla with {self.model} ({reference.label}) on the {self.tuning_questions} tuning "
                         f"questions ({name} {self.objective.shown(reference.quality)}).")
        elif reference.on_front:
            lines.append(f"Vanilla is on the Pareto front: no configuration is better at its cost "
                         f"({shown_cost(self.cost, reference.cost)} {cost_unit(self.cost)} a question, "
                         f"{name} {self.objective.shown(reference.quality)} on the tuning questions).")
        challenger = best if best is not reference else next((r for r in self.chosen if not r.reference), None)
        if challenger is not None:
            lines.append(self.gain_line(challenger, reference, best=challenger is best))
        elif best is reference:
            lines.append("No other configuration reached the front, so there is no gain to confirm.")
        return lines

    def gain_line(self, row: Row, reference: Row, *, best: bool) -> str:
        difference, confirming = row.difference, row.confirming
        what = "Best configuration" if best else "The best other configuration"
        if difference is None or confirming is None or reference.confirming is None:
            return f"{what}: {row.label} (not confirmed yet: run `winnow tune` again)."
        shown = self.objective.shown_difference
        text = (f"{what}: {row.label}: {self.objective.name} {shown(difference.mean_difference)} over vanilla with "
                f"the same model on the {difference.questions} confirming questions (95% paired bootstrap interval "
                f"{shown(difference.low)} to {shown(difference.high)}; {difference.wins} better, "
                f"{difference.losses} worse, sign test p = {difference.p_value:.2g}): "
                f"{self.objective.shown(_mean(confirming.quality))} against "
                f"{self.objective.shown(_mean(reference.confirming.quality))}, at "
                f"{shown_cost(self.cost, _mean(confirming.cost))} {cost_unit(self.cost)} a question against "
                f"{shown_cost(self.cost, _mean(reference.confirming.cost))}.")
        if difference.mean_difference < 0:
            text += " On the confirming questions vanilla did better."
        elif difference.low <= 0 <= difference.high:
            text += " The interval includes 0: these questions do not show a gain."
        return text

    def summary(self) -> str:
        spend, counts = self.spending, self.counts
        minutes, seconds = divmod(int(round(spend.seconds)), 60)
        estimated = f", {spend.estimated} of them extrapolated from the questions they were asked" \
            if spend.estimated else ""
        return (f"{counts.get('configurations', 0)} configurations ({counts.get('complete', 0)} measured on all "
                f"{self.tuning_questions} tuning questions, {counts.get('pruned', 0)} stopped early by halving, "
                f"{counts.get('failed', 0)} failed; {counts.get('refused', 0)} draws refused by the settings' "
                f"rules, {counts.get('repeated', 0)} repeated a configuration) in {minutes} min {seconds} s. "
                f"LLM calls: {spend.calls_made:,} made for tuning against {spend.full_grid_calls:,.0f} for a full "
                f"evaluation of the same {spend.configurations} configurations on every tuning question without "
                f"the call cache ({100 * spend.share:.1f}%{estimated}); halving asked {spend.calls_asked:,} of "
                f"them and the call cache answered {spend.calls_asked - spend.calls_made:,}; "
                f"{spend.confirming_calls:,} more to confirm; {spend.tokens:,} tokens sent.")

    def to_dict(self) -> dict[str, Any]:
        def row(r: Row) -> dict[str, Any]:
            data: dict[str, Any] = {"trial": r.number, "label": r.label, **r.configuration.to_dict(),
                                    "tuning_quality": r.quality, "tuning_cost": r.cost, "on_front": r.on_front,
                                    "reference": r.reference}
            if r.confirming is not None:
                data.update(confirming_quality=_mean(r.confirming.quality), confirming_cost=_mean(r.confirming.cost))
            if r.difference is not None:
                data["difference"] = vars(r.difference).copy()
            return data

        spend = self.spending
        return {"objective": self.objective.name, "cost": self.cost, "model": self.model, "lead": self.lead(),
                "questions": {"tuning": self.tuning_questions, "confirming": self.confirming_questions,
                              "rungs": self.rungs},
                "best": None if self.best is None else self.best.number,
                "front": [row(r) for r in self.front], "confirmed": [row(r) for r in self.chosen],
                "trials": self.counts,
                "spending": {"configurations": spend.configurations, "calls_made": spend.calls_made,
                             "calls_asked": spend.calls_asked,
                             "full_grid_calls": round(spend.full_grid_calls, 1), "share": round(spend.share, 4),
                             "estimated_configurations": spend.estimated, "confirming_calls": spend.confirming_calls,
                             "tokens": spend.tokens, "seconds": round(spend.seconds, 1)}}


def build_report(study: TuneStudy, confirmed: Mapping[int, Measured], *, model: str, seconds_now: float) -> TuneReport:
    """The report of ``study`` as it stands, with the confirming results of ``confirmed``."""
    rows, counts, spending = _rows_and_counts(study)
    reference_row = next((row for row in rows if row.reference), None)
    for row in rows:
        row.confirming = confirmed.get(row.number)
    if reference_row is not None and reference_row.confirming is not None:
        for row in rows:
            if row.confirming is not None and not row.reference:
                row.difference = paired_difference(reference_row.confirming.quality, row.confirming.quality,
                                                   seed=study.plan.seed)
    spending.confirming_calls = sum(m.calls for m in confirmed.values())
    spending.tokens += sum(m.tokens for m in confirmed.values())
    spending.seconds = seconds_now + sum(float(v) for k, v in study.study.user_attrs.items()
                                         if k.startswith("session:"))
    return TuneReport(study.plan.objective, study.plan.cost, model, len(study.questions.tuning),
                      len(study.questions.confirming), list(study.sizes), rows, counts, spending)


def _rows_and_counts(study: TuneStudy) -> tuple[list[Row], dict[str, int], Spending]:
    states = study.optuna.trial.TrialState
    counts = {"configurations": 0, "complete": 0, "pruned": 0, "failed": 0, "refused": 0, "repeated": 0,
              "running": 0}
    spending = Spending()
    per_question: dict[str, tuple[int, int]] = {}  # configuration -> (calls without the cache, questions)
    rows: list[Row] = []
    seen_keys: set[str] = set()
    for trial in study.study.get_trials(deepcopy=False):
        attrs = trial.user_attrs
        if "refused" in attrs or "repeat_of" in attrs:
            counts["refused" if "refused" in attrs else "repeated"] += 1
            continue
        if "config" not in attrs:
            continue
        counts["configurations"] += 1
        name = {states.COMPLETE: "complete", states.PRUNED: "pruned", states.FAIL: "failed"}.get(trial.state,
                                                                                                "running")
        counts[name] += 1
        rungs = rung_results(attrs)
        measured = joined(rungs)
        spending.calls_made += measured.calls
        spending.calls_asked += measured.calls if "twin_of" in attrs else measured.uncached_calls
        spending.tokens += measured.tokens
        configuration = Configuration.from_dict(attrs["config"])
        key = configuration.key()
        if rungs and "twin_of" not in attrs:
            calls, asked = per_question.get(key, (0, 0))
            if len(measured.ids) > asked:
                per_question[key] = (measured.uncached_calls, len(measured.ids))
        if trial.state == states.COMPLETE and key not in seen_keys:
            seen_keys.add(key)
            rows.append(Row(trial.number, configuration, measured, reference=bool(attrs.get("reference"))))
    tuning = len(study.questions.tuning)
    spending.configurations = len(per_question)
    spending.full_grid_calls = sum(calls / asked * tuning for calls, asked in per_question.values() if asked)
    spending.estimated = sum(1 for _, asked in per_question.values() if asked < tuning)
    front = {p.key for p in pareto_front([Point(r.number, tuple(r.tuning.quality), r.cost) for r in rows])}
    for row in rows:
        row.on_front = row.number in front
    return rows, counts, spending


def markdown(report: TuneReport, plot: str = "") -> str:
    """report.md: the lead, the front with its confirming figures, the spending."""
    objective, unit = report.objective, cost_unit(report.cost)
    lines = ["# winnow tune", "", *report.lead(), ""]
    if plot:
        lines += [f"![quality against cost]({plot})", ""]
    lines += [f"## Pareto front on the {report.tuning_questions} tuning questions", "",
              f"| trial | configuration | {objective.name} (tuning) | {unit} a question | {objective.name} "
              f"(confirming) | vs vanilla [95% interval] |", "|---:|---|---:|---:|---:|---|"]
    for row in report.front:
        confirming = objective.shown(_mean(row.confirming.quality)) if row.confirming else "–"
        difference = row.difference
        versus = ("reference" if row.reference else "–" if difference is None else
                  f"{objective.shown_difference(difference.mean_difference)} "
                  f"[{objective.shown_difference(difference.low)}, {objective.shown_difference(difference.high)}]")
        lines.append(f"| {row.number} | {row.label} | {objective.shown(row.quality)} | "
                     f"{shown_cost(report.cost, row.cost)} | {confirming} | {versus} |")
    lines += ["", "## Spending", "", report.summary(), ""]
    return "\n".join(lines)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0
