"""``winnow ask`` and ``winnow rerank``: a method answers a question; a reranker orders your passages."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..run_spec import DEFAULT_BACKEND, DEFAULT_MODEL, RunOptions, resolve_run
from ..text import check_text
from .common import (
    HistoryOption,
    IndexOption,
    JsonOption,
    StageProgress,
    TurnOption,
    app,
    dialogue_from,
    err,
    open_pipeline,
    out,
    stop_on_ctrl_c,
    with_run_options,
)


@app.command()
@with_run_options()
def ask(
    question: Annotated[str, typer.Argument(help="The question; - reads it from stdin.")],
    index_dir: IndexOption,
    options: RunOptions,
    turns: TurnOption = None,
    history: HistoryOption = None,
    as_json: JsonOption = False,
) -> None:
    """Answer QUESTION from the index with a method, showing how each stage ranked the passages."""
    from ..methods.base import check_dialogue
    from ..records import Query
    from ..report import print_answer, summary_line

    question = from_stdin(question) if question == "-" else question
    check_text(question, "the question")
    dialogue = dialogue_from(turns, history)
    spec = resolve_run(options)
    check_dialogue(spec.method_settings(), 1 if dialogue else 0)  # before loading a model
    progress = StageProgress(err)
    pipeline = open_pipeline(spec, index_dir, options, progress=progress)
    with pipeline, progress.bar, stop_on_ctrl_c(lambda: sum(llm.inflight for llm in pipeline.llms)):
        answer = pipeline.ask(Query(question, history=dialogue))
    if as_json:
        payload = answer.to_dict()
        payload["settings"].update(pipeline.describe())
        payload["model"] = pipeline.llm.identity
        out.print_json(data=payload)
    else:
        print_answer(out, answer)
    err.print(summary_line(answer.usage, answer.trace.seconds))


def from_stdin(what: str = "the question") -> str:
    """``-`` as an argument: the text piped in (a trailing newline dropped), refused when nothing is."""
    from ..errors import WinnowError

    if sys.stdin.isatty():
        raise WinnowError(f"{what} is '-' but nothing is piped to stdin", "e.g. echo 'who painted the mona lisa' | "
                                                                       "winnow ask --index IDX -")
    return sys.stdin.read().strip()


#: The run options a reranker without an index or method takes: which model, where, how.
RERANK_RUN_OPTIONS = ("model", "backend", "base_url", "api_key", "max_inflight", "timeout", "slots", "threads",
                      "context_size", "no_cache")


@app.command()
@with_run_options(only=RERANK_RUN_OPTIONS)
def rerank(
    query: Annotated[str, typer.Argument(help="The query to rank passages for.")],
    passages_file: Annotated[Path, typer.Argument(help="JSONL file (- for stdin) of {\"id\", \"title\", "
                                                       "\"text\"}, in the "
                                                       "order of your first stage.")],
    options: RunOptions,
    method: Annotated[str, typer.Option("--method", "-m", help="pointwise (RankRAG P(True)), graded (RRR 1-5), "
                                                               "listwise (RankGPT) or embedding (MiniLM cosine, "
                                                               "no LLM).")] = "pointwise",
    top_n: Annotated[Optional[int], typer.Option("--top-n", help="Keep only the best N.")] = None,
    window: Annotated[int, typer.Option("--window", help="listwise: window size.")] = 10,
    step: Annotated[int, typer.Option("--step", help="listwise: step.")] = 5,
    as_json: JsonOption = False,
) -> None:
    """Rerank the passages of a JSONL file for QUERY: Winnow as a reranker in your own pipeline."""
    from ..corpus import load_corpus
    from ..llm import load_llm
    from ..report import passages_table, summary_line, usage_table
    from ..rerank import RerankSettings
    from ..rerank import rerank as rerank_passages

    check_text(query, "the query")
    settings = RerankSettings.from_values({"method": method, "keep": top_n, "window": window, "step": step})
    if str(passages_file) == "-":  # the corpus reader names files and lines: give stdin a file of its own
        import tempfile

        with tempfile.TemporaryDirectory() as folder:
            piped = Path(folder) / "stdin.jsonl"
            piped.write_text(sys.stdin.read(), encoding="utf-8")
            corpus = load_corpus(piped)
    else:
        corpus = load_corpus(passages_file)
    if corpus.report.kept != corpus.report.read:
        err.print(corpus.report.summary())
    count = len(corpus.passages)
    if method == "embedding":  # the LLM-free baseline: nothing to load but the embedder
        from ..index import load_embedder

        done = rerank_passages(query, corpus.passages, settings, embedder=load_embedder())
    else:
        progress = StageProgress(err)
        model = options.model or DEFAULT_MODEL
        with err.status(f"loading {model}"):
            llm = load_llm(model, backend=options.backend or DEFAULT_BACKEND,
                           base_url=",".join(options.base_url or ()), api_key=options.api_key or "",
                           cache=options.cache, progress=progress, max_inflight=options.max_inflight,
                           slots=options.slots, threads=options.threads, context_size=options.context_size,
                           timeout=options.timeout)
        try:
            with progress.bar:
                done = rerank_passages(query, corpus.passages, settings, llm=llm)
        finally:
            llm.close()
    ranked, trace = done.ranked, done.trace
    if as_json:
        out.print_json(data={"query": query, "method": method, "results": ranked.to_dicts(),
                             "usage": trace.usage.to_dict(), "trace": trace.to_dict()})
    else:
        out.print(passages_table(ranked, title=f"{method} reranking of {count} passages for {query!r}",
                                     width=out.width))
        out.print(usage_table(trace.stages))
    err.print(summary_line(trace.usage, trace.seconds))
