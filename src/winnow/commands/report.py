"""``winnow report``: compare evaluation runs in a Markdown file with PNG plots beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..extras import require
from .common import JsonOption, PricesOption, app, err, out


@app.command(name="report")
def report(
    run_dirs: Annotated[list[Path], typer.Argument(help="Run folders made by `winnow eval`.")],
    out_file: Annotated[Path, typer.Option("--out", "-o", help="Markdown file to write; plots go beside it.")],
    question: Annotated[Optional[str], typer.Option("--question", help="Question id for the MAIN-RAG judge-score "
                                                                       "plot (default: each run's first "
                                                                       "question).")] = None,
    title: Annotated[str, typer.Option("--title", help="The report's heading.")] = "Evaluation report",
    prices: PricesOption = None,
    table_format: Annotated[str, typer.Option("--format", metavar="FORMAT",
                                              help="markdown, csv (a file per table) or latex (REPORT.tex): "
                                                   "the tables also written so.")] = "markdown",
    as_json: JsonOption = False,
) -> None:
    """Side-by-side table of runs (methods × metrics × cost, first-stage baseline included) and plots:
    answer Recall@k before/after reranking, accuracy and time against N, MAIN-RAG's judge scores."""
    require("eval", "winnow report")
    from ..evaluation.prices import read_prices
    from ..evaluation.report import write_report

    written = write_report(run_dirs, out_file, question=question, title=title,
                           prices=read_prices(prices) if prices else None, fmt=table_format)
    if as_json:
        out.print_json(data=written)
    else:
        err.print(f"wrote {written['report']} and {len(written['images'])} plot(s) for {written['runs']} run(s)"
                  + (f"; tables: {', '.join(written['tables'])}" if written["tables"] else "")
                  + (f"; left out (nothing answered): {', '.join(written['skipped'])}" if written["skipped"] else ""),
                  highlight=False)
