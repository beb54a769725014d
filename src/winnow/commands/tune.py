"""``winnow tune``: which method, settings and model per agent role give the best answers on your
questions, and what each point of quality costs (docs/tuning.md)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.markup import escape

from ..errors import WinnowError
from ..run_spec import RunOptions, RunSpec, resolve_run
from .common import (
    IndexOption,
    JsonOption,
    StageProgress,
    app,
    err,
    exit_for,
    out,
    quiet_notices,
    spinner_while_loading,
    stop_on_signal,
    with_run_options,
)

if TYPE_CHECKING:
    from rich.progress import TaskID
    from rich.table import Table

    from ..llm.client import LLM
    from ..pipeline import Pipeline
    from ..tuning.report import TuneReport
    from ..tuning.space import SearchSpace
    from ..tuning.study import Plan, Questions, TuneStudy

#: The run options of `winnow tune`: which model, where and how. The method and its settings are
#: what the search chooses (the space file), so their options are not offered here.
TUNE_RUN_OPTIONS = ("model", "backend", "base_url", "api_key", "max_inflight", "timeout", "hedge", "tokenizer", "slots",
                    "threads", "context_size", "retriever", "ann", "ann_set", "no_cache")
STUDY_FILE = "study.sqlite"
#: The call cache of a study run with --no-cache: its configurations still share calls, with nothing else.
STUDY_CACHE = "calls.sqlite"


@app.command()
@with_run_options(only=TUNE_RUN_OPTIONS)
def tune(
    index_dir: IndexOption,
    options: RunOptions,
    queries: Annotated[Path, typer.Option("--queries", "-q", help="QA JSONL file of the questions to tune on.")],
    qrels: Annotated[Optional[Path], typer.Option("--qrels", help="TREC qrels, for --objective ndcg@K.")] = None,
    space: Annotated[Optional[Path], typer.Option("--space", help="TOML search space: per method, settings' values "
                                                                  "or ranges, agent roles' models "
                                                                  "(docs/tuning.md); default: every method's "
                                                                  "main settings.")] = None,
    objective: Annotated[str, typer.Option("--objective", help="accuracy, em, f1, ndcg@K (needs --qrels) or "
                                                               "answer_recall@K.")] = "accuracy",
    cost: Annotated[str, typer.Option("--cost", help="calls, tokens, usd (needs --prices) or seconds: per "
                                                     "question, without the call cache.")] = "calls",
    study_dir: Annotated[Path, typer.Option("--study", help="Folder of the study: its database, the front, "
                                                            "the plot and the chosen run files.")] = Path("tune-study"),
    storage: Annotated[Optional[str], typer.Option("--storage", help="Database URL of the study, to share it "
                                                                     "between machines (e.g. postgresql://…); "
                                                                     "default: STUDY/study.sqlite.")] = None,
    study_name: Annotated[str, typer.Option("--study-name", help="The study's name in its database.")] = "winnow-tune",
    trials: Annotated[int, typer.Option("--trials", min=1, help="Configurations to try in all (vanilla, the "
                                                                "reference, is one).")] = 30,
    bracket: Annotated[int, typer.Option("--bracket", min=1, help="Configurations drawn together, then halved "
                                                                  "over the rungs of questions.")] = 10,
    eta: Annotated[int, typer.Option("--eta", min=2, help="Halving rate: 1/ETA of a bracket goes on to ETA times "
                                                          "the questions.")] = 3,
    min_questions: Annotated[int, typer.Option("--min-questions", min=1, help="Questions of the first rung "
                                                                              "(at least).")] = 5,
    confirm_share: Annotated[float, typer.Option("--confirm-share", min=0.0, max=0.9,
                                                 help="Share of the questions held out to confirm the chosen "
                                                      "configurations against vanilla.")] = 0.34,
    confirm: Annotated[int, typer.Option("--confirm", min=1, help="Front configurations re-measured on the "
                                                                  "confirming questions (best first).")] = 5,
    seed: Annotated[int, typer.Option("--seed", help="Seeds the split, the question order and the sampler.")] = 0,
    limit: Annotated[Optional[int], typer.Option("--limit", min=2, help="Use this many of the questions "
                                                                         "(a seeded sample).")] = None,
    batch_size: Annotated[Optional[int], typer.Option("--batch-size", min=1, help="Questions asked together "
                                                                                  "(default: --max-inflight "
                                                                                  "for a server, else "
                                                                                  "--slots).")] = None,
    prices: Annotated[Optional[Path], typer.Option("--prices", help="Price table (USD per million tokens per "
                                                                    "model), for --cost usd.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Search methods, settings and agent models for the best answers per cost on QUERIES.

    Configurations are measured on growing subsets of the tuning questions (successive halving),
    sharing one call cache; the chosen ones are re-measured on held-out confirming questions against
    vanilla with the same model. Interrupted, the same command continues the study.
    """
    from ..extras import require
    from ..lock import output_lock

    require("tune", "winnow tune")
    spec = resolve_run(options)
    searched, plan, questions, conditions = _prepare(
        spec, index_dir, queries=queries, qrels=qrels, space=space, objective=objective, cost=cost, trials=trials,
        bracket=bracket, eta=eta, min_questions=min_questions, confirm_share=confirm_share, confirm=confirm,
        seed=seed, limit=limit, batch_size=batch_size, prices=prices)
    study_dir.mkdir(parents=True, exist_ok=True)
    with output_lock(study_dir):
        _run(spec, options, index_dir, study_dir, storage, study_name, searched, plan, questions, conditions,
             as_json=as_json)


def _prepare(spec: RunSpec, index_dir: Path, *, queries: Path, qrels: Path | None, space: Path | None,
             objective: str, cost: str, trials: int, bracket: int, eta: int, min_questions: int,
             confirm_share: float, confirm: int, seed: int, limit: int | None, batch_size: int | None,
             prices: Path | None) -> tuple[SearchSpace, Plan, Questions, dict[str, Any]]:
    """Every check before a model loads: the objective, cost, space, questions, qrels and split."""
    from ..datasets import read_qa_jsonl, read_qrels
    from ..evaluation.prices import read_prices
    from ..index.manifest import file_sha256, read_manifest
    from ..tuning.objectives import check_cost, parse_objective
    from ..tuning.space import read_space
    from ..tuning.study import Plan, Questions, split_questions

    chosen = parse_objective(objective)
    price_table = read_prices(prices) if prices else None
    cost = check_cost(cost, price_table)
    if price_table is not None and cost != "usd":
        raise WinnowError("--prices is read only by --cost usd", "add --cost usd, or leave --prices out")
    if qrels is not None and not chosen.needs_qrels:
        raise WinnowError(f"--qrels is read only by an ndcg@K objective, not {chosen.name}",
                          "use --objective ndcg@10, or leave --qrels out")
    if chosen.needs_qrels and qrels is None:
        raise WinnowError(f"--objective {chosen.name} needs relevance judgements", "add --qrels FILE (TREC qrels)")
    searched = read_space(space)
    if not queries.is_file():
        raise WinnowError(f"--queries {queries}: no such file", "give a QA JSONL file (winnow data export …)")
    items = read_qa_jsonl(queries)
    judgements = read_qrels(qrels) if qrels is not None else None
    if judgements is not None:
        judged = [item for item in items if any(grade >= 1 for grade in judgements.get(item.id, {}).values())]
        if len(judged) < len(items):
            err.print(f"{len(items) - len(judged)} of {len(items)} questions have no judgement in {qrels}: "
                      "left out", highlight=False)
        items = judged
    if limit is not None:
        items, _ = split_questions(items, 0.0, seed)
        items = items[:limit]
    tuning, confirming = split_questions(items, confirm_share, seed)
    if len(confirming) < 2 or not tuning:
        raise WinnowError(f"{len(items)} questions split {len(tuning)} to tune on and {len(confirming)} to confirm "
                          "on: too few", "give more questions or change --confirm-share (at least 2 to confirm on "
                                         "and 1 to tune on)")
    size = batch_size or (spec.max_inflight or 64 if spec.backend == "openai" else spec.slots or 1)
    plan = Plan(chosen, cost, trials=trials, bracket=bracket, eta=eta, smallest=min_questions, confirm=confirm,
                seed=seed, batch_size=size)
    manifest = read_manifest(index_dir, verify=False)
    conditions = {"objective": chosen.name, "cost": cost, "space": searched.fingerprint(),
                  "queries": file_sha256(queries), "qrels": file_sha256(qrels) if qrels else "",
                  "prices": price_table.sha256 if price_table else "", "limit": limit, "seed": seed,
                  "confirm_share": confirm_share, "eta": eta, "min_questions": min_questions,
                  "index": manifest.get("source_checksum"), "model": spec.model, "retriever": spec.retriever,
                  "context_size": spec.context_size}
    return searched, plan, Questions(tuning, confirming, judgements, price_table), conditions


def _run(spec: RunSpec, options: RunOptions, index_dir: Path, study_dir: Path, storage: str | None, name: str,
         searched: SearchSpace, plan: Plan, questions: Questions, conditions: dict[str, Any], *,
         as_json: bool) -> None:
    from ..datasets import write_qa_jsonl
    from ..tuning.study import TuneStudy, Workbench

    url = storage or f"sqlite:///{(study_dir / STUDY_FILE).resolve()}"
    study = TuneStudy.open(url, name, searched, plan, questions, conditions)
    write_qa_jsonl(questions.tuning, study_dir / "tuning.jsonl")
    write_qa_jsonl(questions.confirming, study_dir / "confirming.jsonl")
    done, total = study.finished(), study.configurations()
    err.print(f"study {name!r} in {study_dir}: {len(questions.tuning)} tuning questions in rungs of "
              f"{', '.join(map(str, study.sizes))}, {len(questions.confirming)} confirming; {plan.objective.name} "
              f"against {plan.cost}; {total} of {plan.trials} configurations drawn, {done} finished"
              + (f"; space of {searched.size():,} configurations" if searched.size() else ""), highlight=False)
    stages = StageProgress(err)
    pipelines = _open_models(spec, options, index_dir, searched, stages, questions, study_dir)
    started = time.perf_counter()
    bench = Workbench(spec, pipelines[0].index, {p.spec.model: p.llm for p in pipelines}, str(index_dir))
    progress = TuneProgress(stages)
    try:
        with stages.bar, stop_on_signal(lambda: sum(p.llm.inflight for p in pipelines)):
            study.run(bench, progress)
            confirmed = study.confirm(bench, progress)
    except KeyboardInterrupt as stop:
        try:
            study.save_session(time.perf_counter() - started)
        except Exception as exc:  # noqa: BLE001  the trials are kept; only this run's time is lost
            err.print(f"[yellow]note:[/] this run's time was not recorded in the study: {escape(str(exc))}",
                      highlight=False)
        # One line, then the status Ctrl-C gives (130), without the command line's own "interrupted".
        err.print(f"interrupted: {study.finished()} finished trials are kept in {study_dir}; run the same command "
                  "again to continue the study (no finished trial is measured again)", highlight=False)
        raise exit_for(stop) from None
    finally:
        for pipeline in pipelines:
            pipeline.close()
    for notice in bench.notices:
        err.print(f"[yellow]note:[/] {escape(notice)}", highlight=False)
    _finish(study, confirmed, spec, study_dir, time.perf_counter() - started, as_json=as_json)


def _open_models(spec: RunSpec, options: RunOptions, index_dir: Path, searched: SearchSpace, stages: StageProgress,
                 questions: Questions, study_dir: Path) -> list[Pipeline]:
    """The run's model, then every other model the space names for an agent role, over one index.
    With --no-cache the configurations still share calls, through STUDY/calls.sqlite only."""
    import os

    from ..pipeline import Pipeline

    key = options.api_key or os.environ.get("WINNOW_OPENAI_API_KEY", "")
    cache: bool | Path = study_dir / STUDY_CACHE if options.no_cache else True
    pipelines: list[Pipeline] = []
    try:
        for model in [spec.model, *searched.models()]:
            if model in {p.spec.model for p in pipelines}:
                continue
            with spinner_while_loading(spec.backend) as loading, quiet_notices():
                pipelines.append(Pipeline(dataclasses.replace(spec, model=model, agents={}), index_dir, api_key=key,
                                          cache=cache, progress=stages, loading=loading, threads=options.threads,
                                          retriever=pipelines[0].index if pipelines else None))
        if questions.prices is not None:
            _check_priced([p.llm for p in pipelines], questions)
    except BaseException:
        for pipeline in pipelines:
            pipeline.close()
        raise
    return pipelines


def _check_priced(llms: list[LLM], questions: Questions) -> None:
    prices = questions.prices
    assert prices is not None
    missing = [llm.model_name for llm in llms if prices.price_of(llm.model_name) is None]
    if missing:
        raise WinnowError(f"--prices {prices.path} has no price for model(s) {missing}",
                          "add them (a local model can cost 0) or choose another --cost")


class TuneProgress:
    """The study's progress on the stage bars' display: trials finished, the questions of the measurement."""

    def __init__(self, stages: StageProgress) -> None:
        self.bar = stages.bar
        self.trials_task: TaskID | None = None
        self.questions_task: TaskID | None = None

    def trials(self, finished: int, total: int) -> None:
        if self.trials_task is None:
            self.trials_task = self.bar.add_task("trials finished", total=total)
        self.bar.update(self.trials_task, completed=finished, total=total)

    def measuring(self, text: str, questions: int) -> None:
        if self.questions_task is not None:
            self.bar.remove_task(self.questions_task)
        short = text if len(text) <= 90 else text[:89] + "…"
        self.questions_task = self.bar.add_task(escape(short), total=questions)

    def answered(self, questions: int) -> None:
        if self.questions_task is not None:
            self.bar.advance(self.questions_task, questions)

    def note(self, text: str) -> None:
        self.bar.console.print(escape(text), highlight=False)


def _finish(study: TuneStudy, confirmed: Any, spec: RunSpec, study_dir: Path, seconds: float, *,
            as_json: bool) -> None:
    from ..atomic import write_json, write_text
    from ..tuning.report import build_report, markdown

    study.save_session(seconds)
    report = build_report(study, confirmed, model=spec.model, seconds_now=0.0)
    written = _write_run_files(report, spec, study_dir)
    plot = _plot(report, study_dir)
    write_text(study_dir / "report.md", markdown(report, plot.name if plot else ""))
    data = report.to_dict()
    data["files"] = {"run_files": [str(p) for p in written], "plot": str(plot) if plot else None,
                     "report": str(study_dir / "report.md")}
    write_json(study_dir / "summary.json", data)
    if as_json:
        out.print_json(data=data)
        return
    for line in report.lead():
        out.print(f"[bold]{escape(line)}[/]", highlight=False)
    out.print(front_table(report))
    best = study_dir / "best.toml"
    if best.exists():
        out.print(f"best configuration: {best} (winnow ask --index … --config {best} \"…\"); the report: "
                  f"{study_dir / 'report.md'}", highlight=False)
    out.print(escape(report.summary()), highlight=False)


def _write_run_files(report: TuneReport, spec: RunSpec, study_dir: Path) -> list[Path]:
    """configs/trial-N.toml for each confirmed configuration, and best.toml for the best."""
    from ..tuning.runfile import write_run_file

    written = []
    best = report.best
    for row in report.chosen:
        header = [f"winnow tune: trial {row.number}, {row.label}",
                  f"{report.objective.name} {report.objective.shown(row.quality)} on {report.tuning_questions} "
                  f"tuning questions"]
        if row.difference is not None:
            header.append(f"{report.objective.shown_difference(row.difference.mean_difference)} over vanilla on "
                          f"{row.difference.questions} confirming questions (95% interval "
                          f"{report.objective.shown_difference(row.difference.low)} to "
                          f"{report.objective.shown_difference(row.difference.high)})")
        written.append(write_run_file(study_dir / "configs" / f"trial-{row.number}.toml", spec, row.configuration,
                                      header))
        if best is not None and row.number == best.number:
            written.append(write_run_file(study_dir / "best.toml", spec, row.configuration, header))
    return written


def _plot(report: TuneReport, study_dir: Path) -> Path | None:
    """front.png, when matplotlib (the eval extra) is installed; otherwise a note and no plot."""
    from ..evaluation.plots import FrontPoint, plot_pareto_front
    from ..extras import MissingExtra
    from ..tuning.objectives import cost_unit

    points = [FrontPoint(row.label, row.cost, row.quality * (100 if report.objective.in_points else 1),
                         row.on_front, row.reference) for row in report.rows]
    if not points:
        return None
    try:
        return plot_pareto_front(study_dir / "front.png", points,
                                 cost_label=f"{cost_unit(report.cost)} a question (without the call cache)",
                                 quality_label=f"{report.objective.name} on the tuning questions",
                                 title=f"winnow tune · {report.model} · {report.tuning_questions} tuning questions")
    except MissingExtra as exc:
        err.print(f"no plot: {exc}", highlight=False)
        return None


def front_table(report: TuneReport) -> Table:
    from rich.table import Table

    from ..tuning.objectives import cost_unit, shown_cost

    objective = report.objective
    table = Table(title=f"Pareto front: {objective.name} against {cost_unit(report.cost)} a question",
                  title_justify="left")
    for column, justify in (("trial", "right"), ("configuration", "left"), (f"{objective.name} tuning", "right"),
                            ("cost", "right"), (f"{objective.name} confirming", "right"),
                            ("vs vanilla [95% CI]", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for row in report.front:
        difference = row.difference
        versus = ("reference" if row.reference else "–" if difference is None else
                  f"{objective.shown_difference(difference.mean_difference)} "
                  f"[{objective.shown_difference(difference.low)}, {objective.shown_difference(difference.high)}]")
        confirming = objective.shown(sum(row.confirming.quality) / len(row.confirming.quality)) \
            if row.confirming and row.confirming.quality else "–"
        table.add_row(str(row.number), escape(row.label), objective.shown(row.quality),
                      shown_cost(report.cost, row.cost), confirming, versus)
    return table
