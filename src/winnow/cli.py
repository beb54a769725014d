"""The ``winnow`` command line: index, search, ask, models, methods.

Errors a user can fix print as one line and exit with status 2; ``--debug`` shows the traceback.
Results go to stdout (``--json`` prints one JSON object); progress, usage and notes go to stderr.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .errors import WinnowError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Winnow: retrieve, let an LLM rerank and filter, answer from what survives.")
out = Console()
err = Console(stderr=True)
STATE = {"debug": False}

IndexOption = Annotated[Path, typer.Option("--index", "-i", help="Index folder made by `winnow index`.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]


@app.callback()
def _global(debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False) -> None:
    STATE["debug"] = debug


@app.command()
def index(
    source: Annotated[str, typer.Argument(help="A .jsonl file, a BEIR folder, a folder of .txt/.md files, "
                                               "or `wiki-vital` (the 10,033 Wikipedia vital-article summaries).")],
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Folder to create.")],
    chunk_words: Annotated[int, typer.Option("--chunk-words", help="Passage size for text folders.")] = 150,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing index.")] = False,
) -> None:
    """Build a BM25 index (Lucene BM25, k1=0.9, b=0.4, English stop words and Snowball stemmer)."""
    from .corpus import load_corpus, source_checksum
    from .index import build_bm25_index

    started = time.perf_counter()
    corpus = load_corpus(source, chunk_words=chunk_words)
    err.print(corpus.report.summary())
    if not corpus.passages:
        raise WinnowError(f"{source}: no passages to index", "check the file: every record was skipped or it is empty")
    build_bm25_index(corpus.passages, out_dir, source=str(source), source_checksum=source_checksum(corpus.files),
                     load_report=corpus.report.to_dict(), source_options={"chunk_words": chunk_words},
                     overwrite=overwrite, progress=True)
    err.print(f"indexed {len(corpus.passages)} passages into {out_dir} in {time.perf_counter() - started:.1f} s")


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="The search query.")],
    index_dir: IndexOption,
    k: Annotated[int, typer.Option("--k", "-k", min=1, help="How many passages.")] = 10,
    as_json: JsonOption = False,
) -> None:
    """BM25 search: the top k passages for QUERY."""
    from .index import BM25Index
    from .report import passages_table

    idx = BM25Index.open(index_dir)
    started = time.perf_counter()
    hits = idx.search(query, k=k)
    seconds = time.perf_counter() - started
    if as_json:
        out.print_json(data={"query": query, "passages": hits.to_dicts(), "seconds": round(seconds, 4)})
    else:
        out.print(passages_table(hits, title=f"Top {len(hits)} for {query!r}"))
        err.print(f"{seconds * 1000:.1f} ms")


class StageProgress:
    """A progress bar per LLM stage, fed by the LLM client's progress hook."""

    def __init__(self, console: Console) -> None:
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            console=console, transient=True)
        self.tasks: dict[str, int] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage not in self.tasks:
            self.tasks[stage] = self.bar.add_task(f"LLM {stage}", total=total)
        self.bar.update(self.tasks[stage], completed=done, total=total)
        if done >= total:
            self.bar.remove_task(self.tasks.pop(stage))


@app.command()
def ask(
    question: Annotated[str, typer.Argument(help="The question.")],
    index_dir: IndexOption,
    method: Annotated[str, typer.Option("--method", "-m", help="vanilla or rankrag (see `winnow methods`).")] = "rankrag",
    model: Annotated[str, typer.Option("--model", help="Registry name, .gguf path, or the server's model name "
                                                       "with --backend openai.")] = "qwen2.5-coder-1.5b",
    backend: Annotated[str, typer.Option("--backend", help="llama.cpp (in-process) or openai (any "
                                                           "OpenAI-compatible server).")] = "llama.cpp",
    base_url: Annotated[str, typer.Option("--base-url", help="Server URL for --backend openai "
                                                             "(or WINNOW_OPENAI_BASE_URL).")] = "",
    api_key: Annotated[str, typer.Option("--api-key", help="Key for --backend openai (or WINNOW_OPENAI_API_KEY).",
                                         show_default=False)] = "",
    n: Annotated[Optional[int], typer.Option("--n", help="Passages to retrieve (default 20).")] = None,
    k: Annotated[Optional[int], typer.Option("--k", help="Passages to answer from (default 5).")] = None,
    max_answer_tokens: Annotated[Optional[int], typer.Option("--max-answer-tokens")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Bypass the LLM call cache.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Answer QUESTION from the index with a method, showing how each stage ranked the passages."""
    from .index import BM25Index
    from .llm import load_llm
    from .methods import build_method, method_settings
    from .report import print_answer, summary_line

    idx = BM25Index.open(index_dir)
    method_settings(method, n=n, k=k, max_answer_tokens=max_answer_tokens)  # fail fast, before loading a model
    progress = StageProgress(err)
    with err.status(f"loading {model} ({backend})"):
        llm = load_llm(model, backend=backend, base_url=base_url, api_key=api_key, cache=not no_cache,
                       progress=progress)
    try:
        rag = build_method(method, index=idx, llm=llm, n=n, k=k, max_answer_tokens=max_answer_tokens)
        with progress.bar:
            answer = rag.ask(question)
    finally:
        llm.close()
    if as_json:
        payload = answer.to_dict()
        payload["settings"].update({"model": model, "backend": backend, "index": str(index_dir)})
        payload["model"] = llm.identity
        out.print_json(data=payload)
    else:
        print_answer(out, answer)
    err.print(summary_line(answer.usage, answer.trace.seconds))


@app.command()
def models() -> None:
    """List the models Winnow knows, their size, and whether they are installed."""
    from .models import format_models_table, list_models

    out.print(format_models_table(list_models()))


@app.command()
def methods() -> None:
    """List the methods, their stages and defaults."""
    from .methods import METHODS, MethodSettings

    table = Table(title="Methods", title_justify="left")
    for column in ("method", "stages", "what it does", "defaults"):
        table.add_column(column)
    for name, cls in METHODS.items():
        defaults = ", ".join(f"{k}={v}" for k, v in MethodSettings().to_dict().items())
        table.add_row(name, " → ".join(cls.stages), cls.summary, defaults)
    out.print(table)


def main() -> None:
    try:
        app()
    except WinnowError as exc:
        if STATE["debug"]:
            raise
        err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
