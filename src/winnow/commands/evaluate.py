"""``winnow eval``: run a method over a QA set into a resumable run folder, then score it.

See :mod:`winnow.evaluation.runner` for the loop and :mod:`winnow.evaluation.runfolder` for the
folder (config.json, answers.jsonl, metrics.json, runs/*.trec).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, Optional

import typer
from rich import box
from rich.markup import escape

from ..config import parse_assignment
from ..errors import WinnowError
from ..run_spec import RunOptions, RunSpec, resolve_run

if TYPE_CHECKING:
    from rich.table import Table

    from ..evaluation.runner import EvalRun

from .common import (
    IndexOption,
    JsonOption,
    PricesOption,
    StageProgress,
    app,
    err,
    open_pipeline,
    out,
    print_notices,
    quiet_notices,
    spinner_while_loading,
    stop_on_ctrl_c,
    with_run_options,
)

#: The exit status of a run that finished with chosen questions unanswered (2 is an error, 130 Ctrl-C).
INCOMPLETE_EXIT_CODE = 3

if TYPE_CHECKING:
    from ..evaluation.schema import QuestionRecord


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class RunProgress:
    """The question bar (running accuracy, questions/s, LLM calls in flight, tokens/s, time to
    finish) above the LLM stage bars; without a terminal (a run in the background), a plain line
    every minute or 5%.

    ``meter`` says (calls in flight, tokens answered so far) across the run's models; it is read as
    calls finish, so the rates move within a batch, not only when its questions are done. A backend
    that reports no tokens as they finish (in-process llama.cpp) is counted by finished questions.
    """

    REFRESH_SECONDS = 0.25

    def __init__(self, stages: StageProgress, method: str, total: int, answered: list[QuestionRecord],
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
            text += f" · {rate:.2f} q/s · ETA {_duration((self.total - self.done) / rate)}"
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
def evaluate(
    index_dir: IndexOption,
    queries: Annotated[Path, typer.Option("--queries", "-q", help="QA JSONL file: {\"id\", \"question\", "
                                                                  "\"golden_answers\", \"metadata\"} per line "
                                                                  "(and \"history\", a dialogue's earlier turns, "
                                                                  "with --task conversational).")],
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Run folder; the same command resumes it.")],
    options: RunOptions,
    limit: Annotated[Optional[int], typer.Option("--limit", help="Ask only L questions (the first L, or a seeded "
                                                                 "sample with --seed; raise it later to extend "
                                                                 "the run).")] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Choose and order the questions by this seed.")] = None,
    qrels: Annotated[Optional[Path], typer.Option("--qrels", help="TREC qrels: adds nDCG@1/5/10, MRR@10, "
                                                                  "MAP and Recall@k per stage.")] = None,
    capped: Annotated[bool, typer.Option("--capped",
                                         help="Also capped Recall@k (divide by min(k, relevant)).")] = False,
    relevance_level: Annotated[Optional[int], typer.Option("--relevance-level", min=1,
                                                           help="With --qrels: the lowest grade that counts as "
                                                                "relevant for Recall, MRR and MAP (trec_eval's "
                                                                "-l) \\[default: 2 for TREC DL questions, else "
                                                                "1].")] = None,
    batch_size: Annotated[Optional[int], typer.Option("--batch-size", min=1,
                                                      help="Rarely needed. With a server (--backend openai): at "
                                                           "most this many questions in progress at once (each "
                                                           "moves to its next stage as its own calls return; by "
                                                           "default enough to fill --max-inflight). In process, "
                                                           "and per --engine ray worker: questions run together, "
                                                           "each stage over the whole batch (default --slots (1) "
                                                           "for llama.cpp, 8 for transformers, --max-inflight "
                                                           "for a server). Answers are the same either way.")] = None,
    engine: Annotated[str, typer.Option("--engine", help="local (this process) or ray (the questions shared out "
                                                         "over the workers of a Ray cluster; needs the \\[ray] "
                                                         "extra).")] = "local",
    processes: Annotated[Optional[int], typer.Option("--processes", min=1,
                                                     help="--engine local with a server (--backend openai): client "
                                                          "processes on this machine sharing the questions and "
                                                          "--max-inflight (one core turns answers into prompts only "
                                                          "so fast) \\[default: one per 32 of --max-inflight, at "
                                                          "most one per core and per 64 questions].")] = None,
    ray_address: Annotated[Optional[str], typer.Option("--ray-address", help="--engine ray: the cluster's HOST:PORT "
                                                                             "(default: RAY_ADDRESS, or a new "
                                                                             "cluster on this machine).")] = None,
    ray_workers: Annotated[Optional[int], typer.Option("--ray-workers", help="--engine ray: workers, each with its "
                                                                             "own index and models \\[default: one "
                                                                             "per node].")] = None,
    ray_cpus: Annotated[float, typer.Option("--ray-cpus-per-worker", help="--engine ray: CPUs each worker holds "
                                                                          "(llama.cpp's threads).")] = 1,
    prices: PricesOption = None,
    first_stage_run: Annotated[Optional[Path], typer.Option("--run", help="A precomputed first stage to use instead "
                                                                         "of retrieving: a TREC run (e.g. another "
                                                                         "run's runs/first_stage.trec), rank_llm's "
                                                                         "JSON/JSONL or FlashRAG's retrieval cache; "
                                                                         "its ids are looked up in --index.")] = None,
    sweep: Annotated[Optional[str], typer.Option("--sweep", help="SETTING=V1,V2,…: one run folder per value in "
                                                                 "OUT/SETTING=VALUE, the LLM calls the values share "
                                                                 "made once (e.g. judge_n=-0.5,0,0.5,1 or "
                                                                 "n=20,40,60,80,100).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Evaluate a method on a QA set: EM, F1, accuracy, answer Recall@k per stage, cost.

    Writes OUT/config.json, OUT/answers.jsonl (one line per finished question), OUT/metrics.json and
    OUT/runs/<stage>.trec. Killed or interrupted, the same command resumes where it stopped.
    """
    from ..evaluation.runner import EvalRun

    check_engine(engine, ray_address=ray_address, ray_workers=ray_workers, ray_cpus=ray_cpus)
    from ..evaluation.prices import read_prices

    price_table = read_prices(prices) if prices else None  # checked before any model loads
    spec = resolve_run(options)
    if first_stage_run is not None and (sweep is not None or engine != "local"):
        raise WinnowError("--run is read with --engine local and without --sweep", "run each setting on its own")
    if processes is not None:
        _check_processes(processes, spec, engine=engine, sweep=sweep, first_stage_run=first_stage_run)
    if first_stage_run is not None and spec.ann:
        raise WinnowError(f"--run and --ann {spec.ann}: a precomputed first stage is read, not searched",
                          "leave --ann out with --run")
    if first_stage_run is not None:  # part of the run's identity: resuming with another first stage is refused
        import dataclasses

        from ..index.manifest import file_sha256

        if not first_stage_run.is_file():
            raise WinnowError(f"--run {first_stage_run}: no such file", "give a TREC run, rank_llm or FlashRAG file")
        spec = dataclasses.replace(spec, first_stage_run=f"{first_stage_run.resolve()} "
                                                         f"sha256:{file_sha256(first_stage_run)}")
    if sweep is not None:
        if engine != "local":
            raise WinnowError("--sweep runs with --engine local", "run each value as its own --engine ray run")
        given = set(options.setting_values()) | {parse_assignment(a)[0] for a in options.assignments or ()}
        _evaluate_sweep(spec, sweep, given, index_dir, queries, out_dir, batch_size=batch_size, options=options,
                        as_json=as_json, eval_options=dict(limit=limit, seed=seed, qrels=qrels, capped=capped,
                                                           relevance_level=relevance_level,
                                                           api_key=options.api_key or "", cache=options.cache,
                                                           prices=price_table))
        return
    run = EvalRun(spec, index_dir, queries, out_dir, limit=limit, seed=seed, qrels=qrels, capped=capped,
                  relevance_level=relevance_level, api_key=options.api_key or "", cache=options.cache,
                  prices=price_table)
    started = time.perf_counter()
    pending = run.prepare()
    if run.folder.torn_line_dropped:
        err.print("dropped a half-written last line of answers.jsonl (the question in flight when the run "
                  "stopped); it is asked again")
    done = len(run.answered())
    count = 1 if engine != "local" else _processes_for(spec, len(pending), processes, first_stage_run)
    err.print(f"{run_label(spec)}: {len(run.selected)} questions, {done} already answered, {len(pending)} to ask"
              + (_asking_note(spec, batch_size, engine, count) if pending else ""), highlight=False)
    interrupted = False
    stale_cache_entries = 0
    if pending:
        stages = StageProgress(err)
        asking: dict[str, Any] = dict(
            on_answer=None, batch_size=batch_size,
            on_failure=lambda qid, why: err.print(f"[yellow]skipped {qid}:[/] {why}", highlight=False))
        if engine == "ray":
            interrupted, stale_cache_entries = _ask_on_ray(run, pending, stages, asking, address=ray_address,
                                                           workers=ray_workers, cpus=ray_cpus)
        elif count > 1:
            interrupted, stale_cache_entries = _ask_on_processes(run, pending, stages, asking, count)
        else:
            interrupted, stale_cache_entries = _ask_here(run, pending, stages, asking, index_dir=index_dir,
                                                         options=options, first_stage_run=first_stage_run)
    metrics = run.finish()
    _print_summary(run, metrics, as_json=as_json, seconds=time.perf_counter() - started,
                   stale_cache_entries=stale_cache_entries)
    if interrupted:
        err.print("interrupted: run the same command again to continue")
        raise KeyboardInterrupt
    if note := run.unanswered_note():
        # A score over fewer questions than chosen is not the run's score: a script must notice.
        err.print(f"[bold red]incomplete:[/] {escape(note)}", highlight=False, soft_wrap=True)
        raise typer.Exit(INCOMPLETE_EXIT_CODE)


def _check_processes(processes: int, spec: RunSpec, *, engine: str, sweep: str | None,
                     first_stage_run: Path | None) -> None:
    """Refuse a ``--processes`` this run cannot honour, before anything loads."""
    from ..evaluation.process_engine import check_processes

    if processes > 1:
        clash = [name for name, given in (("--engine ray", engine != "local"), ("--sweep", sweep is not None),
                                          ("--run", first_stage_run is not None)) if given]
        if clash:
            raise WinnowError(f"--processes {processes} runs with --engine local, not with {', '.join(clash)}",
                              "leave --processes out")
    check_processes(processes, spec)


def _processes_for(spec: RunSpec, pending: int, given: int | None, first_stage_run: Path | None) -> int:
    """Client processes for this run: the given --processes, else the default for its servers."""
    from ..evaluation.process_engine import default_processes

    if given is not None:
        return given
    return 1 if first_stage_run is not None else default_processes(spec, pending)


def _asking_note(spec: RunSpec, batch_size: int | None, engine: str, processes: int = 1) -> str:
    """How the pending questions are asked, for the run's first line (see EvalRun.ask_all)."""
    from ..evaluation.runner import default_batch_size

    if spec.backend == "openai" and engine == "local":
        cap = f", at most {batch_size} at once (--batch-size)" if batch_size else ""
        spread = f", shared by {processes} client processes (--processes)" if processes > 1 else ""
        return f" as they flow through the stages{cap}{spread}"
    return f" in batches of {batch_size or default_batch_size(spec.backend, spec.slots, spec.max_inflight)}"


def _ask_here(run: EvalRun, pending: list[Any], stages: StageProgress, asking: dict[str, Any], *,
              index_dir: Path, options: RunOptions, first_stage_run: Path | None = None) -> tuple[bool, int]:
    """Ask ``pending`` in this process; (interrupted by Ctrl-C, stale call-cache entries asked again)."""
    from ..evaluation.runner import dispatch_stats
    from ..index.precomputed import PrecomputedRun

    interrupted = False
    served = PrecomputedRun.open(index_dir, first_stage_run) if first_stage_run is not None else None
    pipeline = open_pipeline(run.spec, index_dir, options, progress=stages, retriever=served)
    with pipeline:
        run.check_models(pipeline)
        run.start_session(len(pending))
        with stages.bar:
            asking["on_answer"] = RunProgress(stages, run.spec.method, len(run.selected), run.answered(),
                                              meter=lambda: _llm_meter(pipeline.llms))
            try:
                with stop_on_ctrl_c(lambda: _llm_meter(pipeline.llms)[0],
                                    saved=f"the answers so far are saved in {run.folder.path}"):
                    run.ask_all(pipeline, pending, **asking)
            except KeyboardInterrupt:
                interrupted = True
            finally:
                _print_endpoint_health(dispatch_stats(pipeline.llms))
        if served is not None and (note := served.summary()):
            err.print(f"--run: {note}", highlight=False, soft_wrap=True)
        return interrupted, sum(llm.stale_cache_entries for llm in pipeline.llms)


def _ask_on_processes(run: EvalRun, pending: list[Any], stages: StageProgress, asking: dict[str, Any],
                      count: int) -> tuple[bool, int]:
    """Ask ``pending`` on ``count`` client processes of this machine; (interrupted by Ctrl-C, stale
    call-cache entries the processes asked again)."""
    from ..evaluation.process_engine import ProcessEngine

    with ProcessEngine(run, count, batch_size=asking["batch_size"]) as engine:
        engine.launch()  # before the status line's thread: on Linux they are then forked
        with err.status(f"starting {count} client processes"):
            engine.start()
        run.start_session(len(pending))
        with stages.bar:
            asking["on_answer"] = RunProgress(stages, run.spec.method, len(run.selected), run.answered())
            try:
                engine.ask_all(pending, **asking)
            except KeyboardInterrupt:  # the client processes ignore it: closing the engine stops them
                return True, 0
            finally:
                _print_endpoint_health(engine.dispatch_stats())
        return False, engine.stale_cache_entries()


def _print_endpoint_health(per_model: list[dict[str, Any]]) -> None:
    """One line per model whose server calls were retried or hedged: how many, how many went to
    another endpoint (failed over), how many hedges answered first, and which endpoints' breakers
    opened (:mod:`winnow.llm.dispatch`)."""
    for found in per_model:
        if not found["retries"] and not found.get("hedges"):
            continue
        opened = [f"{url} ({e['failures']} failures, breaker opened {e['breaker_opened']}×)"
                  for url, e in found["endpoints"].items() if e["breaker_opened"]]
        hedged = f", {found['hedges']} hedged ({found['hedges_won']} answered first)" if found.get("hedges") else ""
        err.print(f"[yellow]endpoints:[/] {found['calls']} calls, {found['retries']} retried, "
                  f"{found['failovers']} failed over to another endpoint{hedged}"
                  + (f"; taken out of the pool: {', '.join(opened)}" if opened else ""), highlight=False)


def _print_summary(run: Any, metrics: dict[str, Any], *, as_json: bool, seconds: float,
                   stale_cache_entries: int) -> None:
    """What the run did and found: notes on what was refused or skipped, the metric and cost tables
    (or the metrics as JSON) and one line of totals."""
    from ..evaluation.qrels_coverage import unknown_documents_note

    if stale_cache_entries:
        err.print(f"[yellow]call cache:[/] {stale_cache_entries} cached answer(s) written by an older Winnow were "
                  "unusable (a NaN log-probability or a missing field) and were asked again; the cache now holds "
                  "the new answers", highlight=False)
    if run.failures:
        err.print(f"[yellow]{len(run.failures)} question(s) failed and were skipped[/] (see "
                  f"{run.folder.errors_path}); run the same command again to retry them", highlight=False)
    if metrics["qrels"] and (note := unknown_documents_note(metrics["qrels"]["index_coverage"])):
        err.print(f"[yellow]qrels:[/] {escape(note)}", highlight=False, soft_wrap=True)
    if run.run_files_error:
        err.print(f"[yellow]TREC run files not written:[/] {run.run_files_error}", highlight=False)
    if as_json:
        out.print_json(data=metrics)
    else:
        out.print(metrics_headline(metrics), highlight=False, markup=False)
        out.print(metrics_table(metrics))
        if metrics.get("stage_cost"):
            err.print(stage_cost_table(metrics["stage_cost"], metrics["questions"]["answered"]))
        if metrics.get("cost_by_model"):
            err.print(model_cost_table(metrics))
    if metrics.get("cost_usd"):
        err.print(usd_line(metrics["cost_usd"]), highlight=False)
    cost = metrics["cost"]
    err.print(f"{run.new_answers} questions answered in {_duration(seconds)}; the run so far: "
              f"{metrics['questions']['answered']}/{metrics['questions']['selected']} questions · "
              f"{cost['llm_calls']} LLM calls ({cost['cache_hits']} cached) · {cost['prompt_tokens']} prompt + "
              f"{cost['completion_tokens']} completion tokens · {cost['seconds_per_question']:.1f} s/question"
              f"{_without_cache(cost)} · wrote {run.folder.path}", highlight=False)


def _evaluate_sweep(spec: RunSpec, sweep: str, given: set[str], index_dir: Path, queries: Path, out_dir: Path, *,
                    batch_size: int | None, options: RunOptions, as_json: bool, eval_options: dict[str, Any]) -> None:
    """``winnow eval --sweep``: one run per value over one pipeline and call cache (:mod:`winnow.evaluation.sweep`).

    With ``--no-cache`` the values still share their calls, through a cache file of the sweep's own
    (OUT/calls.sqlite) that nothing else reads or fills.
    """
    from ..evaluation.sweep import EvalSweep, parse_sweep
    from ..pipeline import Pipeline
    from ..settings import SettingError

    setting, values = parse_sweep(sweep)
    if setting in given:
        raise SettingError(setting, f"setting {setting!r} is given both by --sweep and by its own flag or --set",
                           "give its values once, in --sweep")
    runs = EvalSweep(spec, setting, values, index_dir, queries, out_dir, **eval_options)
    started = time.perf_counter()
    interrupted = False
    try:
        pending = runs.prepare()
        listed = ", ".join(point.label.split("=", 1)[1] for point in runs.points)
        err.print(f"{spec.method} {spec.model}: {setting} swept over {listed}; {len(runs.points[0].run.selected)} "
                  f"questions each, {sum(len(p) for p in pending.values())} to ask in all", highlight=False)
        if any(pending.values()):
            stages = StageProgress(err)
            with spinner_while_loading(spec.backend) as loading, quiet_notices():
                pipeline = Pipeline(runs.points[0].run.spec, index_dir, api_key=options.api_key or "",
                                    progress=stages, cache=runs.cache_path if options.no_cache else True,
                                    loading=loading, threads=options.threads)
            print_notices(pipeline.method.notices)

            def hooks(point: Any, count: int) -> dict[str, Any]:
                return {"on_answer": RunProgress(stages, f"{spec.method} {point.label}", len(point.run.selected),
                                                 point.run.answered(), meter=lambda: _llm_meter(pipeline.llms)),
                        "on_failure": lambda qid, why: err.print(f"[yellow]{point.label}: skipped {qid}:[/] {why}",
                                                                 highlight=False)}

            with pipeline, stages.bar:
                try:
                    runs.ask_all(pipeline, pending, on_point=hooks, batch_size=batch_size)
                except KeyboardInterrupt:
                    interrupted = True
        summary = runs.finish()
    finally:
        runs.release()
    if as_json:
        out.print_json(data=summary)
    else:
        out.print(sweep_table(summary))
    calls = summary["calls"]
    err.print(f"{len(runs.points)} runs, this session {_duration(time.perf_counter() - started)}; the sweep so far: "
              f"{calls['made']} LLM calls made for {calls['asked']} asked ({calls['asked'] - calls['made']} shared "
              f"between values or cached before) · wrote {runs.out} (sweep.json and a run folder per value)",
              highlight=False)
    if interrupted:
        err.print("interrupted: run the same command again to continue")
        raise KeyboardInterrupt


def sweep_table(summary: dict[str, Any]) -> Table:
    """Answers and calls per value; for a sweep over N, RankRAG's reranking time overhead (§4.3, §5.5)."""
    from rich.table import Table

    over_n = summary["setting"] == "n"
    title = f"{summary['method']} {summary['model']} · sweep over {summary['setting']}"
    caption = "calls: made / asked; the rest came from the call cache (shared with another value, or cached before)"
    if over_n:
        title += " (RankRAG §5.5, Fig. 5)"
        caption += ("\noverhead: N·t2 / (t1 + t3) (RankRAG §4.3), seconds per question: t1 retrieval, N·t2 the model "
                    "calls before generation, t3 generation; cached calls at the seconds first measured")
    table = Table(title=title, title_justify="left", caption=caption, caption_justify="left", **NARROW)
    columns = [summary["setting"], "questions", "EM", "F1", "acc.", "calls"]
    if over_n:
        columns += ["t1 s", "N·t2 s", "t3 s", "overhead"]
    rows = []
    for row in summary["rows"]:
        cells = [str(row["value"]), str(row["questions"]), f"{row['em']:.1%}", f"{row['f1']:.1%}",
                 f"{row['accuracy']:.1%}", f"{row['llm_calls']} / {row['llm_calls'] + row['cache_hits']}"]
        if over_n:
            eff = row.get("efficiency") or {}
            ratio = eff.get("overhead_ratio")
            cells += [f"{eff.get('retrieval_seconds', 0):.3f}", f"{eff.get('reranking_seconds', 0):.2f}",
                      f"{eff.get('generation_seconds', 0):.2f}", "–" if ratio is None else f"{ratio:.2f}x"]
        rows.append(cells)
    for i, column in enumerate(columns):
        # Figures keep their full width (calls may break at its " / "); headers wrap at a space.
        least = 0 if column == "calls" else max((len(cells[i]) for cells in rows), default=0)
        table.add_column(column, justify="right", min_width=least)
    for cells in rows:
        table.add_row(*cells)
    return table


ENGINES = ("local", "ray")
#: Light borders and one space between cells: the run's tables keep every figure whole at 80 columns.
NARROW: dict[str, Any] = {"box": box.SIMPLE_HEAD, "collapse_padding": True, "pad_edge": False}


def check_engine(engine: str, *, ray_address: str | None, ray_workers: int | None, ray_cpus: float) -> None:
    """Refuse an unknown engine, and Ray options without ``--engine ray``, before anything loads."""
    from ..extras import require

    if engine not in ENGINES:
        raise WinnowError(f"--engine {engine!r} is not one of {', '.join(ENGINES)}")
    given = [name for name, value in (("--ray-address", ray_address), ("--ray-workers", ray_workers),
                                      ("--ray-cpus-per-worker", ray_cpus != 1)) if value]
    if engine != "ray" and given:
        raise WinnowError(f"{', '.join(given)} only apply with --engine ray")
    if engine == "ray":
        require("ray", "winnow eval --engine ray")
        if ray_address:
            from ..evaluation.ray_engine import check_reachable

            check_reachable(ray_address)


def _ask_on_ray(run: Any, pending: list[Any], stages: StageProgress, asking: dict[str, Any], *,
                address: str | None, workers: int | None, cpus: float) -> tuple[bool, int]:
    """Ask ``pending`` on the workers of a Ray cluster; (interrupted by Ctrl-C, stale call-cache
    entries the workers asked again)."""
    from ..evaluation.ray_engine import RayEngine

    with err.status("joining the Ray cluster"):
        engine = RayEngine(run, address=address, workers=workers, cpus_per_worker=cpus)
    with engine:
        with err.status(f"starting {engine.count} Ray worker(s) ({run.spec.backend})"):
            engine.start()
        err.print(f"Ray: {engine.count} worker(s) on {', '.join(sorted(set(engine.hosts)))}", highlight=False)
        run.start_session(len(pending))
        with stages.bar:
            asking["on_answer"] = RunProgress(stages, run.spec.method, len(run.selected), run.answered())
            try:
                engine.ask_all(pending, **asking)
            except KeyboardInterrupt:
                return True, 0
        return False, engine.stale_cache_entries()


def _llm_meter(llms: list[Any]) -> tuple[int, int]:
    """(calls in flight, tokens answered so far) over a pipeline's models."""
    return sum(llm.inflight for llm in llms), sum(llm.tokens_done for llm in llms)


def stage_cost_table(stage_cost: dict[str, dict[str, float]], questions: int) -> Table:
    """The run's LLM cost per stage: calls, tokens and the seconds the calls took on the server side
    (summed over calls, so calls in flight together count each; more than the stage's wall time)."""
    from rich.table import Table

    table = Table(title=f"LLM cost per stage over {questions} questions", title_justify="left", **NARROW)
    rows = []
    for name, cost in stage_cost.items():
        if not cost.get("llm_calls") and not cost.get("llm_seconds"):
            continue  # retrieval and other stages without the LLM
        total = {key: value * questions for key, value in cost.items()}
        rows.append([name, f"{total['llm_calls']:,.0f}", f"{total['prompt_tokens']:,.0f}",
                     f"{total['completion_tokens']:,.0f}", f"{total.get('llm_seconds', 0):,.1f}",
                     f"{total.get('retries', 0):,.0f}", f"{total['seconds']:,.1f}"])
    columns = ("stage", "calls", "prompt tok", "output tok", "server s", "retries", "wall s")
    for i, column in enumerate(columns):
        # Each figure's full width is its column's least, so figures stay whole; headers wrap at their space.
        table.add_column(column, justify="left" if column == "stage" else "right", no_wrap=column == "stage",
                         min_width=max((len(row[i]) for row in rows), default=0))
    for row in rows:
        table.add_row(*row)
    return table


def model_cost_table(metrics: dict[str, Any]) -> Table:
    """The run's LLM cost per model and per agent role (GAR-meets-RAG App. B, Table A1): calls and
    tokens, and USD with ``--prices``."""
    from rich.table import Table

    questions = metrics["questions"]["answered"]
    priced = metrics.get("cost_usd") is not None
    table = Table(title=f"LLM cost per model and role over {questions} questions", title_justify="left", **NARROW)
    for column in ("per", "name", "calls", "prompt tok", "output tok", "cache hits", *(["USD"] if priced else [])):
        table.add_column(column, justify="left" if column in ("per", "name") else "right", no_wrap=column != "name",
                         overflow="fold")
    rows = [("model", name, cost) for name, cost in metrics["cost_by_model"].items()]
    rows += [("role", name, cost) for name, cost in (metrics.get("cost_by_role") or {}).items()]
    for kind, name, cost in rows:
        usd = cost.get("usd")
        money = [f"{usd:,.4f}" if usd is not None else "no price"] if priced else []
        table.add_row(kind, escape(name), f"{cost['llm_calls']:,}", f"{cost['prompt_tokens']:,}",
                      f"{cost['completion_tokens']:,}", f"{cost['cache_hits']:,}", *money)
    return table


def usd_line(usd: dict[str, Any]) -> str:
    """The run's cost in USD as one line (a model without a price makes no total: it is named)."""
    if usd["total"] is None:
        return (f"cost in USD: not computed, {usd['prices']} has no price for {', '.join(usd['unpriced_models'])} "
                f"(add them; 0 for a free local model)")
    line = f"cost in USD ({usd['prices']}): {usd['total']:,.4f} in all, {usd['per_question']:,.6f} per question"
    if usd["without_cache_per_question"] is not None and usd["without_cache_per_question"] != usd["per_question"]:
        line += f" ({usd['without_cache_per_question']:,.6f} per question had nothing come from the call cache)"
    return line


def _without_cache(cost: dict[str, Any]) -> str:
    full = cost.get("without_cache")
    if not cost["cache_hits"] or full is None:
        return ""
    return (f" (without the cache: {full['llm_calls_per_question']:.1f} calls, "
            f"{full['prompt_tokens_per_question']:.0f} prompt tokens and "
            f"{full['llm_seconds_per_question']:.1f} s of model time per question)")


def run_label(spec: RunSpec) -> str:
    from ..evaluation.runner import run_label as label

    return label(spec)


def metrics_headline(metrics: dict[str, Any]) -> str:
    """The run's label and answer metrics: a line of its own above :func:`metrics_table`, wrapped at
    the terminal's width (as a table title it wrapped at the table's, cutting the label in two)."""
    answer = metrics["answer"]
    return (f"{metrics['run']['label']} · {metrics['questions']['answered']} questions · "
            f"EM {answer['em']:.1%} · F1 {answer['f1']:.1%} · accuracy {answer['accuracy']:.1%}")


def metrics_table(metrics: dict[str, Any]) -> Table:
    """Answer Recall@k (and nDCG@10, MRR@10 with qrels) per list; :func:`metrics_headline` goes above it."""
    from rich.table import Table

    recall = metrics["answer_recall"]
    ks = list(next(iter(recall.values())).keys()) if recall else []
    qrels_rows = (metrics.get("qrels") or {}).get("rows") or {}
    qrels_names = [name for name in ("nDCG@10", "MRR@10") if qrels_rows]
    table = Table(caption="R@k: share of questions with an answer in the top k", caption_justify="left", **NARROW)
    table.add_column("list", no_wrap=True)
    for column in ("len", *ks, *qrels_names):
        table.add_column(column, justify="right", no_wrap=True)
    for row in metrics["rows"]:
        table.add_row(row, f"{metrics['list_length'][row]:.1f}", *[f"{recall[row][k]:.1%}" for k in ks],
                      *[f"{qrels_rows[row][name]:.3f}" for name in qrels_names])
    return table
