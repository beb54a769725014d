"""``winnow data list|export`` and ``winnow bench-data build``: benchmark questions and judgments.

The named datasets are read from Pyserini 0.21.0's jar (:mod:`winnow.datasets.catalog`); ``export``
also takes a BEIR folder or ``irds:<ir_datasets id>``. ``bench-data build`` makes wiki-vital QA
(:mod:`winnow.datasets.wiki_vital_qa`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from ..errors import WinnowError
from .common import JsonOption, app, err, out

data_app = typer.Typer(no_args_is_help=True, help="Benchmark questions, answers and relevance judgments.")
bench_app = typer.Typer(no_args_is_help=True, help="Build benchmarks that run offline from installed data.")
app.add_typer(data_app, name="data")
app.add_typer(bench_app, name="bench-data")


@data_app.command("list")
def data_list(as_json: JsonOption = False) -> None:
    """Every named dataset: kind, questions (and judged ones), source and licence."""
    from ..datasets import dataset_specs

    rows: list[dict[str, Any]] = []
    with err.status("reading the Pyserini jar"):
        for spec in dataset_specs():
            dataset = spec.load()
            rows.append({"name": spec.name, "kind": spec.kind, "questions": len(dataset.questions),
                         "judged": dataset.judged if dataset.qrels is not None else None,
                         "description": spec.description, "source": spec.source, "licence": spec.licence})
    if as_json:
        out.print_json(data=rows)
        return
    # Below 120 columns the Pyserini file column goes (--json has it) and the borders thin out, so
    # names, counts and licences stay whole at 80 columns.
    wide = out.width >= 120
    table = Table(title="Datasets (export with `winnow data export NAME --out FILE.jsonl`)", title_justify="left",
                  box=box.HEAVY_HEAD if wide else box.SIMPLE_HEAD)
    table.add_column("name", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("questions", justify="right", no_wrap=True)
    table.add_column("judged", justify="right", no_wrap=True)
    if wide:
        table.add_column("file in the Pyserini 0.21.0 jar", overflow="fold")
    table.add_column("licence", overflow="fold")
    for row in rows:
        entry = row["source"].split(": ", 1)[-1].split(", ")[0]  # the topics file; qrels are named alike
        judged = "" if row["judged"] is None else f"{row['judged']:,}"
        cells = [row["name"], row["kind"], f"{row['questions']:,}", judged, *([entry] if wide else []), row["licence"]]
        table.add_row(*(escape(cell) for cell in cells))
    out.print(table)
    err.print("Also: a BEIR folder (its queries.jsonl and qrels/<split>.tsv) or irds:<ir_datasets id>, "
              "e.g. irds:beir/scifact/test (needs ir_datasets and a network); a downloaded benchmark file as "
              "kilt:FILE, asqa:FILE[#SPLIT], arc:FILE, mirage:FILE[#SET], popqa:FILE, popqa-longtail:FILE, "
              "2wiki:FILE, topiocqa:FILE, inscit:FILE or doc2dial:FILE (conversational: questions with their history).")


def qrels_path_for(questions_file: Path) -> Path:
    """Where ``export`` puts the qrels of ``NAME.jsonl``: ``qrels.NAME.txt`` beside it (Anserini's naming)."""
    stem = questions_file.name.removesuffix(".gz").removesuffix(".jsonl")
    return questions_file.with_name(f"qrels.{stem}.txt")


@data_app.command("export")
def data_export(
    name: Annotated[str, typer.Argument(help="A name from `winnow data list`, a BEIR folder, "
                                             "irds:<ir_datasets id>, or a downloaded benchmark file as LAYOUT:PATH "
                                             "(kilt, asqa, arc, mirage, popqa, popqa-longtail, 2wiki, topiocqa, "
                                             "inscit, doc2dial; "
                                             "asqa:FILE#SPLIT, mirage:FILE#SET).")],
    out_file: Annotated[Path, typer.Option("--out", "-o", help="QA JSONL file to write; retrieval sets also "
                                                               "get qrels.<name>.txt beside it.")],
    split: Annotated[str, typer.Option("--split", help="For a BEIR folder: which qrels/<split>.tsv.")] = "test",
    judged_only: Annotated[bool, typer.Option("--judged-only", help="Only the questions with relevance judgments "
                                                                   "(TREC DL20 judges 54 of its 200 queries: "
                                                                   "its metrics are over those).")] = False,
) -> None:
    """Write a dataset's questions as QA JSONL (and its qrels as a TREC file beside them)."""
    from ..datasets import load_dataset, write_qa_jsonl, write_qrels
    from ..datasets.benchmarks import is_benchmark_file

    started = time.perf_counter()
    with err.status(f"loading {name}"):
        dataset = load_dataset(name, split=split)
    questions = dataset.questions
    unjudged = len(questions) - dataset.judged if dataset.qrels is not None else 0
    if judged_only:
        if dataset.qrels is None:
            raise WinnowError(f"--judged-only: {dataset.name} has no relevance judgments",
                              "leave --judged-only out for a QA set")
        questions = [item for item in questions if dataset.qrels.get(item.id)]
    count = write_qa_jsonl(questions, out_file)
    wrote = f"wrote {count:,} questions of {dataset.name} to {out_file}"
    if judged_only and unjudged:
        wrote += f" ({unjudged:,} without judgments left out)"
    if dataset.qrels is not None:
        qrels_file = qrels_path_for(out_file)
        judgments = write_qrels(dataset.qrels, qrels_file)
        wrote += f" and {judgments:,} judgments to {qrels_file}"
    err.print(f"{wrote} in {time.perf_counter() - started:.1f} s (licence: {dataset.licence})")
    if unjudged and not judged_only:
        err.print(f"note: {unjudged:,} of the {len(questions):,} questions have no relevance judgments; qrels "
                  "metrics are computed over the judged ones only, and --judged-only leaves the others out",
                  highlight=False)
    if is_benchmark_file(name):  # what was read, and what was left out of it and why
        err.print(f"read from the {dataset.source}", highlight=False)


@bench_app.command("build")
def bench_build(
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Folder to create.")],
    seed: Annotated[int, typer.Option("--seed", help="Seed of the dev/test split.")] = 0,
    dev_fraction: Annotated[float, typer.Option("--dev-fraction", help="Share of questions in dev.")] = 0.3,
    limit: Annotated[Optional[int], typer.Option("--limit", help="Only the first N questions of each source "
                                                                 "(a quick partial build).")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an earlier build.")] = False,
) -> None:
    """Build wiki-vital QA: NQ-open and TriviaQA test questions answerable from a Wikipedia vital-article
    summary they name, with qrels and a dev/test split (rules: docs/wiki-vital-qa.md)."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    from ..datasets.wiki_vital_qa import DROP_RULES, build_wiki_vital_qa
    from ..progress import progress_bar

    bar = progress_bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                       console=err, transient=True)

    def progress(total: int) -> Callable[[int], None]:
        task = bar.add_task("matching questions to articles", total=total)
        return lambda done: bar.advance(task, done)

    with bar:
        report = build_wiki_vital_qa(out_dir, seed=seed, dev_fraction=dev_fraction, limit=limit,
                                     overwrite=overwrite, progress=progress)
    table = Table(title=f"wiki-vital QA: {report.articles:,} articles", title_justify="left")
    for column in ("source", "considered", *(f"dropped:\n{rule}" for rule in DROP_RULES), "dev", "test",
                   "numeric\nanswer"):
        table.add_column(column, justify="left" if column == "source" else "right")
    for source, counts in report.selection.counts.items():
        table.add_row(source, f"{counts.considered:,}", *(f"{counts.dropped[rule]:,}" for rule in DROP_RULES),
                      f"{counts.kept['dev']:,}", f"{counts.kept['test']:,}", f"{counts.numeric_answers:,}")
    out.print(table)
    splits = report.selection.splits
    err.print(f"built {report.out}: {len(splits['dev']):,} dev and {len(splits['test']):,} test questions "
              f"in {report.seconds:.1f} s (no LLM calls)" + (f"; partial: first {limit} per source" if limit else ""))
