"""``winnow eval``: run a method over a QA set into a resumable run folder, then score it.

The command resolves its options (:class:`~winnow.evaluation.options.EvalOptions`), chooses an
engine (:func:`~winnow.evaluation.engines.engine_for`), runs it over the questions still to ask
and prints what the run found (:mod:`.eval_tables`). See :mod:`winnow.evaluation.runner` for the
run's state and :mod:`winnow.evaluation.runfolder` for the folder (config.json, answers.jsonl,
metrics.json, runs/*.trec).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from ..evaluation.options import EvalOptions
from ..run_spec import RunOptions
from .common import (
    IndexOption,
    JsonOption,
    StageProgress,
    app,
    err,
    exit_for,
    open_pipeline,
    out,
    print_notices,
    quiet_notices,
    spinner_while_loading,
    stop_on_signal,
    with_options,
    with_run_options,
)
from .eval_tables import duration, print_endpoint_health, print_summary, sweep_table

if TYPE_CHECKING:
    from ..datasets.qa import QAItem
    from ..evaluation.engines import Engine
    from ..evaluation.options import ResolvedEval
    from ..evaluation.runner import EvalRun
    from ..evaluation.schema import QuestionRecord

#: The exit status of a run that finished with chosen questions unanswered (2 is an error, 130 Ctrl-C).
INCOMPLETE_EXIT_CODE = 3

QueriesOption = Annotated[Path, typer.Option("--queries", "-q", help="QA JSONL file: {\"id\", \"question\", "
                                                                     "\"golden_answers\", \"metadata\"} per line "
                                                                     "(and \"history\", a dialogue's earlier turns, "
                                                                     "with --task conversational).")]
OutOption = Annotated[Path, typer.Option("--out", "-o", help="Run folder; the same command resumes it.")]


class RunProgress:
    """The question bar (running accuracy, questions/s, LLM calls in flight, tokens/s, time to
    finish) above the LLM stage bars; without a terminal (a run in the background), a plain line
    every minute or 5%.

    ``meter`` says (calls in flight, tokens answered so far) across the run's models; it is read as
    calls finish, so the rates move within a batch, not only when its questions are done. A backend
    that reports no tokens as they finish (in-process llama.cpp) is counted by finished questions.
    """

    REFRESH_SECONDS = 0.25

    def __init__(self, stages: StageProgress, method: str, total: int, answered: Sequence[QuestionRecord],
                 meter: Callable[[], tuple[int, int]] = lambda: (0, 0)) -> None:
        self.stages, self.method, self.total, self.meter = stages, method, total, meter
        self.tokens_at_start = meter()[1]
        self.question_tokens = 0  # tokens of the questions answered this session
        self.last_refresh = 0.0
        stages.on_call = self.refresh
        # Running sums, so a question costs O(1) here however long the run.
        self.done = len(answered)
        self.correct = sum(r.scores.accuracy for r in answered)
        self.session_started = time.perf_counter()
        self.session_done = 0
        self.last_line = 0.0
        # Asked once: isatty is a system call, and each one costs the recording thread its turn at
        # the GIL behind the question threads (about 1.5 ms a question against a fast server).
        self.terminal = err.is_terminal
        self.task = stages.bar.add_task(self._text(), total=total, completed=self.done)

    def _text(self) -> str:
        text = f"{self.method}: acc {self.correct / self.done:.1%}" if self.done else f"{self.method}: acc –"
        elapsed = max(time.perf_counter() - self.session_started, 1e-9)
        inflight, tokens = self.meter()
        tokens = max(tokens - self.tokens_at_start, self.question_tokens)
        if self.session_done:
            rate = self.session_done / elapsed
            text += f" · {rate:.2f} q/s · ETA {duration((self.total - self.done) / rate)}"
        return text + f" · {inflight} in flight · {tokens / elapsed:,.0f} tok/s"

    def refresh(self) -> None:
        """Redraw the rates as LLM calls finish (at most a few times a second)."""
        now = time.perf_counter()
        if now - self.last_refresh >= self.REFRESH_SECONDS:
            self.last_refresh = now
            self.stages.bar.update(self.task, description=self._text())

    def __call__(self, record: QuestionRecord) -> None:
        self.session_done += 1
        self.done += 1
        self.correct += record.scores.accuracy
        self.question_tokens += record.usage.prompt_tokens + record.usage.completion_tokens
        text = self._text()
        self.stages.bar.update(self.task, completed=self.done, description=text)
        if not self.terminal:
            elapsed = time.perf_counter() - self.session_started
            if (self.done == self.total or elapsed - self.last_line >= 60
                    or self.session_done % max(1, self.total // 20) == 0):
                err.print(f"[{self.done}/{self.total}] {text}", highlight=False)
                self.last_line = elapsed


@app.command(name="eval")
@with_run_options()
@with_options(EvalOptions, "chosen", "eval")
def evaluate(index_dir: IndexOption, queries: QueriesOption, out_dir: OutOption, options: RunOptions,
             chosen: EvalOptions, as_json: JsonOption = False) -> None:
    """Evaluate a method on a QA set: EM, F1, accuracy, answer Recall@k per stage, cost.

    Writes OUT/config.json, OUT/answers.jsonl (one line per finished question), OUT/metrics.json and
    OUT/runs/<stage>.trec. Killed or interrupted, the same command resumes where it stopped.
    """
    from ..evaluation.engines import engine_for
    from ..evaluation.runner import EvalRun

    resolved = chosen.resolve(options)  # every clash refused before anything loads
    if chosen.sweep is not None:
        return evaluate_sweep(resolved, index_dir, queries, out_dir, options, as_json=as_json)
    run = EvalRun(resolved.spec, index_dir, queries, out_dir, **resolved.run_arguments())
    started = time.perf_counter()
    pending = run.prepare()
    stages = StageProgress(err)
    engine = engine_for(run, chosen, len(pending), lambda served: open_pipeline(
        run.spec, index_dir, options, progress=stages, retriever=served))
    announce(run, pending, engine)
    asked = ask_pending(engine, run, pending, stages) if pending else Asked()
    metrics = run.finish()
    print_summary(run, metrics, as_json=as_json, seconds=time.perf_counter() - started,
                  stale_cache_entries=asked.stale_cache_entries)
    end(run, asked.stopped)


def announce(run: EvalRun, pending: Sequence[QAItem], engine: Engine) -> None:
    """The run's first line: its label, the questions chosen, answered and still to ask, and how."""
    from ..evaluation.labels import run_label

    if run.folder.torn_line_dropped:
        err.print("dropped a half-written last line of answers.jsonl (the question in flight when the run "
                  "stopped); it is asked again")
    err.print(f"{run_label(run.spec)}: {len(run.selected)} questions, {len(run.answered())} already answered, "
              f"{len(pending)} to ask" + (engine.describe() if pending else ""), highlight=False)


@dataclass
class Asked:
    """How the asking ended: the signal that stopped it (None: it finished) and the call-cache
    entries refused as unusable and asked again."""

    stopped: KeyboardInterrupt | None = None
    stale_cache_entries: int = 0


def ask_pending(engine: Engine, run: EvalRun, pending: Sequence[QAItem], stages: StageProgress) -> Asked:
    """Start ``engine``, then ask ``pending`` under the run's progress bar, the same on every engine:
    a signal to stop (SIGINT, SIGTERM; :func:`~winnow.commands.common.stop_on_signal`) says what it
    waits for, the endpoints' health and the engine's notes are printed, the stale entries counted."""
    stopped: KeyboardInterrupt | None = None
    with closing(engine):
        try:
            with stop_on_signal(engine.in_flight, saved=f"the answers so far are saved in {run.folder.path}"):
                if note := engine.start(err.status):
                    err.print(note, highlight=False)
                run.start_session(len(pending))
                with stages.bar:
                    progress = RunProgress(stages, run.spec.method, len(run.selected), run.answered(),
                                           meter=engine.meter)
                    try:
                        engine.ask_all(pending, on_answer=progress, on_failure=lambda qid, why: err.print(
                            f"[yellow]skipped {qid}:[/] {why}", highlight=False))
                    finally:
                        print_endpoint_health(engine.dispatch_stats())
        except KeyboardInterrupt as stop:
            stopped = stop
        for note in engine.notes():
            err.print(note, highlight=False, soft_wrap=True)
        return Asked(stopped, engine.stale_cache_entries())


def end(run: EvalRun, stopped: KeyboardInterrupt | None) -> None:
    """Exit as the run ended: stopped (130 for Ctrl-C, 143 for SIGTERM), incomplete (3) or done (0)."""
    if stopped is not None:
        err.print("interrupted: run the same command again to continue")
        raise exit_for(stopped) from stopped
    if note := run.unanswered_note():
        # A score over fewer questions than chosen is not the run's score: a script must notice.
        err.print(f"[bold red]incomplete:[/] {escape(note)}", highlight=False, soft_wrap=True)
        raise typer.Exit(INCOMPLETE_EXIT_CODE)


def evaluate_sweep(resolved: ResolvedEval, index_dir: Path, queries: Path, out_dir: Path, options: RunOptions, *,
                   as_json: bool) -> None:
    """``winnow eval --sweep``: one run per value over one pipeline and call cache (:mod:`winnow.evaluation.sweep`).

    With ``--no-cache`` the values still share their calls, through a cache file of the sweep's own
    (OUT/calls.sqlite) that nothing else reads or fills.
    """
    from ..evaluation.sweep import EvalSweep, parse_sweep

    spec = resolved.spec
    setting, values = parse_sweep(resolved.options.sweep or "")
    runs = EvalSweep(spec, setting, values, index_dir, queries, out_dir, **resolved.run_arguments())
    started = time.perf_counter()
    stopped: KeyboardInterrupt | None = None
    try:
        pending = runs.prepare()
        listed = ", ".join(point.label.split("=", 1)[1] for point in runs.points)
        err.print(f"{spec.method} {spec.model}: {setting} swept over {listed}; {len(runs.points[0].run.selected)} "
                  f"questions each, {sum(len(p) for p in pending.values())} to ask in all", highlight=False)
        if any(pending.values()):
            stopped = _ask_sweep(runs, pending, index_dir, options, resolved.options.batch_size)
        summary = runs.finish()
    finally:
        runs.release()
    if as_json:
        out.print_json(data=summary)
    else:
        out.print(sweep_table(summary))
    calls = summary["calls"]
    err.print(f"{len(runs.points)} runs, this session {duration(time.perf_counter() - started)}; the sweep so far: "
              f"{calls['made']} LLM calls made for {calls['asked']} asked ({calls['asked'] - calls['made']} shared "
              f"between values or cached before) · wrote {runs.out} (sweep.json and a run folder per value)",
              highlight=False)
    if stopped is not None:
        err.print("interrupted: run the same command again to continue")
        raise exit_for(stopped) from stopped


def _ask_sweep(runs: Any, pending: dict[str, list[QAItem]], index_dir: Path, options: RunOptions,
               batch_size: int | None) -> KeyboardInterrupt | None:
    """Ask every value's pending questions over one pipeline; the signal that stopped it, if one did."""
    from ..evaluation.answering import llm_meter
    from ..pipeline import Pipeline

    spec = runs.points[0].run.spec
    stages = StageProgress(err)
    with spinner_while_loading(spec.backend) as loading, quiet_notices():
        pipeline = Pipeline(spec, index_dir, api_key=options.api_key or "", progress=stages,
                            cache=runs.cache_path if options.no_cache else True, loading=loading,
                            threads=options.threads)
    print_notices(pipeline.method.notices)

    def hooks(point: Any, count: int) -> dict[str, Any]:
        return {"on_answer": RunProgress(stages, f"{spec.method} {point.label}", len(point.run.selected),
                                         point.run.answered(), meter=lambda: llm_meter(pipeline.llms)),
                "on_failure": lambda qid, why: err.print(f"[yellow]{point.label}: skipped {qid}:[/] {why}",
                                                         highlight=False)}

    with pipeline, stages.bar:
        try:
            with stop_on_signal(lambda: llm_meter(pipeline.llms)[0],
                                saved=f"the answers so far are saved in {runs.out}"):
                runs.ask_all(pipeline, pending, on_point=hooks, batch_size=batch_size)
        except KeyboardInterrupt as stop:
            return stop
    return None
