"""One method setting swept over values in one ``winnow eval --sweep SETTING=V1,V2,…``.

The papers' ablations vary one setting with the rest fixed: MAIN-RAG's n of the adaptive judge bar
(n ∈ {−0.5, 0, 0.5, 1}, its ablation table of n and document ordering) and RankRAG's N (§5.5 and
Fig. 5: N = 20 … 100 against exact match and the time overhead of reranking). A sweep runs the
values one after another over one loaded pipeline and one call cache, so a call two values share
is made once and served from the cache after:

* MAIN-RAG's Agent-1 answers and Agent-2 judge calls do not depend on n (only the bar and Agent-3
  do): one set of judge calls, one answer set per n;
* RankRAG scores each passage alone with the same prompt, so the P("True") calls for the top 20
  are among those for the top 100: the values share the calls of the passages they have in common.

``OUT/SETTING=VALUE/`` is an ordinary run folder per value (resumable, readable by ``winnow
report``); ``OUT/sweep.json`` lists the setting, the values, their folders and a summary per value
(answers, calls made and served from the cache, the reranking overhead of :mod:`.efficiency`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import yaml

from ..atomic import write_json
from ..config import read_yaml
from ..errors import WinnowError
from ..settings import SettingError
from .answering import ask_in_process
from .runfolder import CONFIG, now
from .runner import EvalRun
from .schema import Metrics

if TYPE_CHECKING:
    from ..datasets.qa import QAItem
    from ..pipeline import Pipeline
    from ..run_spec import RunSpec

SWEEP_FILE = "sweep.json"
#: The call cache of a sweep run with ``--no-cache``: its values still share calls, with nothing else.
SWEEP_CACHE = "calls.sqlite"


def parse_sweep(text: str) -> tuple[str, list[Any]]:
    """``SETTING=V1,V2,…`` as (setting, values); each value is read as YAML, as ``--set`` values are."""
    setting, sep, listed = text.partition("=")
    setting = setting.strip().replace("-", "_")
    raw = [value.strip() for value in listed.split(",")]
    if not sep or not setting or not all(raw):
        raise WinnowError(f"--sweep {text!r} is not SETTING=V1,V2,…", "e.g. --sweep judge_n=-0.5,0,0.5,1")
    try:
        return setting, [read_yaml(value) for value in raw]
    except yaml.YAMLError as exc:
        raise SettingError(setting, f"--sweep {setting}: a value is not readable ({exc})") from exc


def value_label(value: object) -> str:
    """A value as folder names show it: 0.5, -0.5, 0 (a float that is whole), 20, random."""
    if isinstance(value, float):
        return f"{value:g}"
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass
class SweepPoint:
    """One value of the sweep: its run folder's name, the value and the run."""

    label: str
    value: Any
    run: EvalRun


def sweep_specs(spec: RunSpec, setting: str, values: Sequence[Any]) -> list[tuple[str, Any, RunSpec]]:
    """(folder name, coerced value, RunSpec) per value; an unknown setting, a value that does not
    coerce or a value given twice is refused, naming the setting."""
    from ..methods import method_class, method_settings

    settings_type = method_class(spec.method).Settings
    known = settings_type.field_types()
    if setting not in known:
        raise SettingError(setting, f"--sweep: method {spec.method!r} has no setting {setting!r}",
                           f"its settings: {', '.join(known)}")
    if setting in method_class(spec.method).unused_settings:
        raise SettingError(setting, f"--sweep: method {spec.method!r} does not use setting {setting!r}, so every "
                                    "value would give the same run")
    if not values:
        raise SettingError(setting, f"--sweep {setting}: no values given")
    points: list[tuple[str, Any, RunSpec]] = []
    for value in values:
        coerced = getattr(method_settings(spec.method, **{**spec.settings, setting: value}), setting)
        label = f"{setting}={value_label(coerced)}"
        if any(label == seen for seen, _, _ in points):
            raise SettingError(setting, f"--sweep {setting}: the value {value_label(coerced)} is given twice")
        points.append((label, coerced, dataclasses.replace(spec, settings={**spec.settings, setting: coerced})))
    return points


class EvalSweep:
    """The runs of one sweep, prepared, asked over one pipeline and finished together."""

    def __init__(self, spec: RunSpec, setting: str, values: Sequence[Any], index_dir: Path, queries: Path, out: Path,
                 **run_options: Any) -> None:
        self.spec, self.setting, self.out = spec, setting, Path(out).expanduser()
        self.points = [SweepPoint(label, value, EvalRun(point_spec, index_dir, queries, self.out / label,
                                                        **run_options))
                       for label, value, point_spec in sweep_specs(spec, setting, values)]

    @property
    def cache_path(self) -> Path:
        """Where the sweep's calls are shared when the user's call cache is off (``--no-cache``)."""
        return self.out / SWEEP_CACHE

    def prepare(self) -> dict[str, list[Any]]:
        """Open (or resume) every value's run folder; the questions each still has to ask, by folder name."""
        if (self.out / CONFIG).is_file():
            raise WinnowError(f"{self.out} is a run folder; a sweep writes one run folder per value inside its --out",
                              "give a new --out folder for the sweep")
        return {point.label: point.run.prepare() for point in self.points}

    def ask_all(self, pipeline: Pipeline, pending: dict[str, list[QAItem]], *,
                on_point: Callable[[SweepPoint, int], dict[str, Any]] | None = None,
                batch_size: int | None = None) -> None:
        """Ask each value's pending questions over ``pipeline``, the method rebuilt with that value's
        settings (same index, same models, same call cache). ``on_point(point, pending)`` is told
        before each value starts and returns the ``on_answer``/``on_failure`` hooks for it."""
        for point in self.points:
            questions = pending[point.label]
            if not questions:
                continue
            valued = pipeline.with_settings(point.run.spec.method, point.run.spec.settings)
            point.run.check_models(valued)
            point.run.start_session(len(questions))
            hooks = on_point(point, len(questions)) if on_point else {}
            ask_in_process(point.run, valued, questions, batch_size=batch_size, **hooks)

    def finish(self) -> dict[str, Any]:
        """Every run's metrics, and ``OUT/sweep.json``: the summary per value (returned)."""
        rows = []
        for point in self.points:
            point.run.finish()
            assert point.run.metrics is not None  # finish() sets them
            rows.append(summary_row(point, point.run.metrics))
        summary = {"written": now(), "setting": self.setting, "method": self.spec.method, "model": self.spec.model,
                   "values": [point.value for point in self.points], "rows": rows,
                   "calls": {"made": sum(row["llm_calls"] for row in rows),
                             "asked": sum(row["llm_calls"] + row["cache_hits"] for row in rows)}}
        write_json(self.out / SWEEP_FILE, summary)
        return summary

    def release(self) -> None:
        for point in self.points:
            point.run.release()


def summary_row(point: SweepPoint, metrics: Metrics) -> dict[str, Any]:
    """One value's line of ``sweep.json``: answers, calls made and served from the cache, efficiency."""
    return {"value": point.value, "folder": point.label, "label": metrics.run.label,
            "questions": metrics.questions.answered, **metrics.answer.to_json(),
            "llm_calls": metrics.cost.llm_calls, "cache_hits": metrics.cost.cache_hits,
            "failed_this_session": metrics.questions.failed_this_session,
            "efficiency": metrics.efficiency.to_json() if metrics.efficiency else None}
