"""``winnow ask`` and ``winnow rerank``: a method answers a question; a reranker orders your passages."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from ..errors import WinnowError
from ..run_spec import DEFAULT_BACKEND, DEFAULT_MODEL, RunOptions, resolve_run
from ..text import check_text
from .common import (
    GENERATED_HELP,
    HistoryOption,
    IndexOption,
    JsonOption,
    StageProgress,
    TurnOption,
    app,
    completion,
    dialogue_from,
    err,
    exit_for,
    help_with_choices,
    open_pipeline,
    out,
    stop_on_signal,
    with_run_options,
)

if TYPE_CHECKING:
    from ..corpus import Corpus


@app.command()
@with_run_options()
def ask(
    question: Annotated[str, typer.Argument(help="The question; - reads it from stdin.")],
    index_dir: IndexOption,
    options: RunOptions,
    turns: TurnOption = None,
    history: HistoryOption = None,
    as_json: JsonOption = False,
    # A precomputed first stage (a TREC run, rank_llm's JSON/JSONL, FlashRAG's retrieval cache) whose
    # ids are looked up in --index; --qid is needed for a TREC run (the others also match by text).
    first_stage_run: Annotated[Optional[Path], typer.Option("--run", metavar="FILE", help="A first stage run "
                                                                                          "instead of retrieving.")
                               ] = None,
    qid: Annotated[Optional[str], typer.Option("--qid", metavar="ID", help="The question's id in --run.")] = None,
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
    query, served = Query(question, history=dialogue), None
    if first_stage_run is not None:  # retrieval skipped: the run's ranking for the question, read first
        from ..index.precomputed import PrecomputedRun

        if spec.ann:
            raise WinnowError(f"--run and --ann {spec.ann}: a precomputed first stage is read, not searched",
                              "leave --ann out with --run")
        served = PrecomputedRun.open(index_dir, first_stage_run)
        found = served.run.query_for(question, qid)
        query = Query(question, id=found.id, history=dialogue)
        served.search(query, 1)  # a query the run lacks is refused now, naming it, before a model loads
    elif qid is not None:
        raise WinnowError("--qid names the question in a --run file", "add --run FILE, or leave --qid out")
    progress = StageProgress(err)
    pipeline = open_pipeline(spec, index_dir, options, progress=progress, retriever=served)
    try:
        with pipeline, progress.bar, stop_on_signal(lambda: sum(llm.inflight for llm in pipeline.llms)):
            answer = pipeline.ask(query)
    except KeyboardInterrupt as stop:
        raise exit_for(stop) from stop
    if served is not None and (note := served.summary()):
        err.print(f"--run: {note}", highlight=False, soft_wrap=True)
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

    if sys.stdin.isatty():
        raise WinnowError(f"{what} is '-' but nothing is piped to stdin", "e.g. echo 'who painted the mona lisa' | "
                                                                       "winnow ask --index IDX -")
    return sys.stdin.read().strip()


def rerank_methods() -> tuple[str, ...]:
    """The rerank methods, for ``winnow rerank --method`` (its help and shell completion)."""
    from ..rerank import RERANK_METHODS

    return tuple(RERANK_METHODS)


GENERATED_HELP["method"] = partial(help_with_choices, "", rerank_methods)

#: The run options a reranker without an index or method takes: which model, where, how.
RERANK_RUN_OPTIONS = ("model", "backend", "base_url", "api_key", "max_inflight", "timeout", "slots", "threads",
                      "context_size", "tokenizer", "no_cache")


@app.command()
@with_run_options(only=RERANK_RUN_OPTIONS)
def rerank(
    query: Annotated[str, typer.Argument(help="The query to rank passages for.")],
    passages_file: Annotated[Path, typer.Argument(help="JSONL file (- for stdin) of {\"id\", \"title\", "
                                                       "\"text\"}, in the "
                                                       "order of your first stage.")],
    options: RunOptions,
    # pointwise (RankRAG P(True)), graded (RRR 1-5), listwise (RankGPT), embedding (MiniLM cosine, no
    # LLM), or the papers' trained baselines cross-encoder and monot5 (--model: a folder or hub id).
    method: Annotated[str, typer.Option("--method", "-m", metavar="NAME", help="",
                                        autocompletion=completion(rerank_methods))] = "pointwise",
    top_n: Annotated[Optional[int], typer.Option("--top-n", help="Keep only the best N.")] = None,
    window: Annotated[int, typer.Option("--window", help="listwise: window size.")] = 10,
    step: Annotated[int, typer.Option("--step", help="listwise: step.")] = 5,
    injection_guard: Annotated[str, typer.Option(
        "--injection-guard", help="off, flag (passages that read like instructions to the model are named in "
                                  "the trace), escape (the model reads passages as data), demote (and flagged "
                                  "passages go last).")] = "flag",
    as_json: JsonOption = False,
) -> None:
    """Rerank the passages of a JSONL file for QUERY: Winnow as a reranker in your own pipeline."""
    from ..llm import load_llm
    from ..report import passages_table, summary_line, usage_table
    from ..rerank import MODEL_RERANK_METHODS, RerankSettings, check_rerank_method
    from ..rerank import rerank as rerank_passages

    check_text(query, "the query")
    check_rerank_method(method)
    trained = method in MODEL_RERANK_METHODS  # --model names the reranker model, not an LLM
    if trained:  # no LLM runs: an LLM option given would be dropped unseen
        _refuse_llm_options(options, method)
    settings = RerankSettings.from_values({"method": method, "keep": top_n, "window": window, "step": step,
                                           "model": (options.model or "") if trained else "",
                                           "injection_guard": injection_guard})
    corpus = _read_passages(passages_file)
    if corpus.report.kept != corpus.report.read:
        err.print(corpus.report.summary())
    count = len(corpus.passages)
    if method == "embedding":  # the LLM-free baseline: nothing to load but the embedder
        from ..index import load_embedder

        done = rerank_passages(query, corpus.passages, settings, embedder=load_embedder())
    elif trained:  # a cross-encoder or monoT5: loaded with transformers, no LLM
        from ..models.rerankers import DEFAULT_RERANKER_MODELS

        with err.status(f"{method} reranking with {settings.model or DEFAULT_RERANKER_MODELS[method]}"):
            done = rerank_passages(query, corpus.passages, settings)
    else:
        progress = StageProgress(err)
        model = options.model or DEFAULT_MODEL
        with err.status(f"loading {model}"):
            llm = load_llm(model, backend=options.backend or DEFAULT_BACKEND,
                           base_url=",".join(options.base_url or ()), api_key=options.api_key or "",
                           cache=options.cache, progress=progress, max_inflight=options.max_inflight,
                           slots=options.slots, threads=options.threads, context_size=options.context_size,
                           timeout=options.timeout, tokenizer=options.tokenizer or "")
        try:
            with progress.bar:
                done = rerank_passages(query, corpus.passages, settings, llm=llm)
        finally:
            llm.close()
    ranked, trace = done.ranked, done.trace
    for stage in trace.stages:
        if stage.kind == "injection-guard" and stage.details.warning:
            err.print(f"[bold yellow]warning:[/] {stage.details.warning}", highlight=False)
    if as_json:
        out.print_json(data={"query": query, "method": method, "results": ranked.to_dicts(),
                             "usage": trace.usage.to_dict(), "trace": trace.to_dict()})
    else:
        out.print(passages_table(ranked, title=f"{method} reranking of {count} passages for {query!r}",
                                     width=out.width))
        out.print(usage_table(trace.stages))
    err.print(summary_line(trace.usage, trace.seconds))


def _refuse_llm_options(options: RunOptions, method: str) -> None:
    """Refuse the LLM's run options for a rerank method that runs no LLM (they would be dropped unseen)."""
    given = [flag for flag, value in (("--backend", options.backend), ("--base-url", options.base_url),
                                      ("--api-key", options.api_key), ("--max-inflight", options.max_inflight),
                                      ("--timeout", options.timeout), ("--slots", options.slots),
                                      ("--threads", options.threads), ("--context-size", options.context_size))
             if value]
    if given:
        raise WinnowError(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to an LLM, and "
                          f"--method {method} runs none", f"leave {', '.join(given)} out; --model names the "
                                                          f"{method} model (a folder or hub id)")


def _read_passages(passages_file: Path) -> Corpus:
    """The passages of a JSONL file, or of stdin for ``-``."""
    from ..corpus import load_corpus

    if str(passages_file) != "-":
        return load_corpus(passages_file)
    import tempfile

    with tempfile.TemporaryDirectory() as folder:  # the corpus reader names files and lines: stdin gets a file
        piped = Path(folder) / "stdin.jsonl"
        piped.write_text(sys.stdin.read(), encoding="utf-8")
        return load_corpus(piped)
