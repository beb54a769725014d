"""The ``winnow`` command line: index, search, ask, models, methods.

Errors a user can fix print as one line and exit with status 2; ``--debug`` shows the traceback.
Results go to stdout (``--json`` prints one JSON object); progress, usage and notes go to stderr.
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .config import parse_assignment
from .errors import WinnowError
from .pipeline import DEFAULT_MODEL
from .text import check_text

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
    dense: Annotated[bool, typer.Option("--dense", help="Also embed every passage (all-MiniLM-L6-v2) for "
                                                        "`search --retriever dense|hybrid`.")] = False,
) -> None:
    """Build a BM25 index (Lucene BM25, k1=0.9, b=0.4, English stop words and Snowball stemmer)."""
    from .corpus import load_corpus, source_checksum
    from .index import build_index, load_embedder
    from .index.build import check_index_out
    from .lock import output_lock

    started = time.perf_counter()
    # Locked and checked before the slow part, so a busy, unwritable or taken --out fails at once.
    with output_lock(out_dir):
        check_index_out(out_dir, overwrite=overwrite)
        embedder = load_embedder() if dense else None  # before reading the corpus: a missing model fails fast
        corpus = load_corpus(source, chunk_words=chunk_words)
        err.print(corpus.report.summary(), soft_wrap=True)
        if not corpus.passages:
            raise WinnowError(f"{source}: no passages to index",
                              "check the file: every record was skipped or it is empty")
        build_index(corpus.passages, out_dir, source=str(source), source_checksum=source_checksum(corpus.files),
                    load_report=corpus.report.to_dict(), source_options={"chunk_words": chunk_words},
                    embedder=embedder, overwrite=overwrite, progress=True)
    if embedder is not None:
        from .index.manifest import read_manifest

        stats = read_manifest(out_dir)["dense"]
        err.print(f"embedded {len(corpus.passages)} passages with {stats['model']} in {stats['seconds']:.1f} s "
                  f"({stats['passages_per_second']:.0f} passages/s, {embedder.threads} threads)")
    err.print(f"indexed {len(corpus.passages)} passages into {out_dir} in {time.perf_counter() - started:.1f} s")


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="The search query.")],
    index_dir: IndexOption,
    k: Annotated[int, typer.Option("--k", "-k", min=1, help="How many passages.")] = 10,
    retriever: Annotated[str, typer.Option("--retriever", "-r", help="bm25, dense, or hybrid (BM25 and dense fused "
                                                                     "by RRF); dense and hybrid need an index "
                                                                     "built with --dense.")] = "bm25",
    as_json: JsonOption = False,
) -> None:
    """Search: the top k passages for QUERY (BM25 unless --retriever says otherwise)."""
    from .index import open_retriever
    from .report import no_hits_note, passages_table

    check_text(query, "the query")
    idx = open_retriever(index_dir, retriever)
    started = time.perf_counter()
    hits = idx.search(query, k=k)
    seconds = time.perf_counter() - started
    if as_json:
        out.print_json(data={"query": query, "retriever": idx.name, "passages": hits.to_dicts(),
                             "seconds": round(seconds, 4)})
    elif not hits:
        err.print(no_hits_note(query, idx.name), highlight=False, soft_wrap=True)
    else:
        out.print(passages_table(hits, title=f"Top {len(hits)} for {query!r} ({idx.name})"))
    if not as_json:
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


ModelOption = Annotated[Optional[str], typer.Option("--model", help="Registry name, .gguf path, or the server's "
                                                                    "model name with --backend openai "
                                                                    "\\[default: qwen2.5-coder-1.5b].")]
BackendOption = Annotated[Optional[str], typer.Option("--backend", help="llama.cpp (in-process, default), openai "
                                                                        "(any OpenAI-compatible server) or "
                                                                        "transformers (a fine-tuned model folder; "
                                                                        "needs the \\[train] extra).")]
BaseUrlOption = Annotated[Optional[str], typer.Option("--base-url", help="Server URL for --backend openai "
                                                                         "(or WINNOW_OPENAI_BASE_URL).")]
ApiKeyOption = Annotated[str, typer.Option("--api-key", help="Key for --backend openai (or WINNOW_OPENAI_API_KEY).",
                                           show_default=False)]
NoCacheOption = Annotated[bool, typer.Option("--no-cache", help="Bypass the LLM call cache.")]
MethodOption = Annotated[Optional[str], typer.Option("--method", "-m", help="vanilla, rankrag, mainrag, rrr or "
                                                                          "rankgpt (see `winnow methods`) "
                                                                          "\\[default: rankrag].")]
RetrieverOption = Annotated[Optional[str], typer.Option("--retriever", help="bm25 (default), dense or hybrid "
                                                                          "(dense needs `winnow index --dense`).")]
NOption = Annotated[Optional[int], typer.Option("--n", help="Passages to retrieve (default 20).")]
KOption = Annotated[Optional[int], typer.Option("--k", help="Passages to answer from (default 5).")]
JudgeModelOption = Annotated[Optional[str], typer.Option("--judge-model", help="mainrag: the judge agent's model "
                                                                          "(the same as --agent judge=MODEL).")]
FinalModelOption = Annotated[Optional[str], typer.Option("--final-model", help="mainrag: the final predictor's model "
                                                                          "(the same as --agent final=MODEL).")]
AgentOption = Annotated[Optional[list[str]], typer.Option("--agent", help="Give an agent role its own model, ROLE=MODEL "
                                                                        "(repeatable): mainrag judge, final; rrr "
                                                                        "rewrite, relevance, rerank.")]
SetOption = Annotated[Optional[list[str]], typer.Option("--set", help="Any method setting, KEY=VALUE (repeatable), "
                                                                      "e.g. --set window=20.")]
ConfigOption = Annotated[Optional[Path], typer.Option("--config", help="TOML or YAML file of settings; flags win.")]
FusionAlphaOption = Annotated[Optional[float], typer.Option("--fusion-alpha", help="Blend reranker and first-stage "
                                                                                   "scores (0 = the paper).")]
ContextSizeOption = Annotated[Optional[int], typer.Option("--context-size", help="Tokens of prompt and answer the "
                                                                              "model's context holds (llama.cpp "
                                                                              "default 4096); longer passages are "
                                                                              "cut to fit, and the trace says so.")]
MaxAnswerTokensOption = Annotated[Optional[int], typer.Option("--max-answer-tokens",
                                                              help="Longest answer the reader may write.")]


def resolve_run(config: Path | None, assignments: list[str] | None, *, agents: list[str] | None = None,
                agents_for_method: bool = True, **flags: Any):
    """The RunSpec of a command's options: the config file, then ``--set`` values and named flags
    (run options such as ``model=`` and method settings such as ``n=`` alike; ``None`` = not given).

    A value given both by ``--set`` and by its own flag must agree; two different values are
    refused rather than one silently winning.
    """
    from .config import RUN_OPTIONS
    from .pipeline import RunSpec

    assigned = dict(parse_assignment(a) for a in assignments or [])
    named = {key: value for key, value in flags.items() if value is not None}
    for key in sorted(assigned.keys() & named.keys()):
        if assigned[key] != named[key]:
            raise WinnowError(f"--set {key}={assigned[key]!r} and --{key.replace('_', '-')} {named[key]!r} disagree",
                              "give the value once")
    values = {**assigned, **named}
    if agents:
        values["agents"] = {**(values.get("agents") or {}), **dict(parse_role(a) for a in agents)}
    run = {key: value for key, value in values.items() if key in RUN_OPTIONS}
    settings = {key: value for key, value in values.items() if key not in RUN_OPTIONS}
    return RunSpec.resolve(config=config, settings=settings, run=run, agents_for_method=agents_for_method)


def parse_role(text: str) -> tuple[str, str]:
    """``--agent judge=qwen2.5-coder-1.5b`` as (role, model)."""
    role, sep, model = text.partition("=")
    if not sep or not role.strip() or not model.strip():
        raise WinnowError(f"--agent {text!r} is not ROLE=MODEL", "e.g. --agent judge=qwen2.5-coder-1.5b")
    return role.strip(), model.strip()


@contextmanager
def spinner_while_loading(backend: str):
    """A spinner naming the model being loaded; yields the callback a Pipeline calls per model."""
    with err.status("loading") as status:
        yield lambda name: status.update(f"loading {name} ({backend})")


@app.command()
def ask(
    question: Annotated[str, typer.Argument(help="The question.")],
    index_dir: IndexOption,
    method: MethodOption = None,
    model: ModelOption = None,
    backend: BackendOption = None,
    base_url: BaseUrlOption = None,
    api_key: ApiKeyOption = "",
    retriever: RetrieverOption = None,
    n: NOption = None,
    k: KOption = None,
    fusion_alpha: FusionAlphaOption = None,
    max_answer_tokens: MaxAnswerTokensOption = None,
    context_size: ContextSizeOption = None,
    judge_model: JudgeModelOption = None,
    final_model: FinalModelOption = None,
    agents: AgentOption = None,
    assignments: SetOption = None,
    config: ConfigOption = None,
    no_cache: NoCacheOption = False,
    as_json: JsonOption = False,
) -> None:
    """Answer QUESTION from the index with a method, showing how each stage ranked the passages."""
    from .pipeline import Pipeline
    from .report import print_answer, summary_line

    check_text(question, "the question")
    spec = resolve_run(config, assignments, agents=agents, method=method, model=model, backend=backend,
                       base_url=base_url, retriever=retriever, judge_model=judge_model, final_model=final_model,
                       n=n, k=k, fusion_alpha=fusion_alpha, max_answer_tokens=max_answer_tokens,
                       context_size=context_size)
    progress = StageProgress(err)
    with spinner_while_loading(spec.backend) as loading:
        pipeline = Pipeline(spec, index_dir, api_key=api_key, cache=not no_cache, progress=progress, loading=loading)
    with pipeline, progress.bar:
        answer = pipeline.ask(question)
    if as_json:
        payload = answer.to_dict()
        payload["settings"].update(pipeline.describe())
        payload["model"] = pipeline.llm.identity
        out.print_json(data=payload)
    else:
        print_answer(out, answer)
    err.print(summary_line(answer.usage, answer.trace.seconds))


@app.command()
def rerank(
    query: Annotated[str, typer.Argument(help="The query to rank passages for.")],
    passages_file: Annotated[Path, typer.Argument(help="JSONL file of {\"id\", \"title\", \"text\"}, in the "
                                                       "order of your first stage.")],
    method: Annotated[str, typer.Option("--method", "-m", help="pointwise (RankRAG P(True)), graded (RRR 1-5), "
                                                               "listwise (RankGPT) or embedding (MiniLM cosine, "
                                                               "no LLM).")] = "pointwise",
    model: ModelOption = None,
    backend: BackendOption = None,
    base_url: BaseUrlOption = None,
    api_key: ApiKeyOption = "",
    top_n: Annotated[Optional[int], typer.Option("--top-n", help="Keep only the best N.")] = None,
    window: Annotated[int, typer.Option("--window", help="listwise: window size.")] = 10,
    step: Annotated[int, typer.Option("--step", help="listwise: step.")] = 5,
    no_cache: NoCacheOption = False,
    as_json: JsonOption = False,
) -> None:
    """Rerank the passages of a JSONL file for QUERY: Winnow as a reranker in your own pipeline."""
    from .corpus import load_corpus
    from .llm import load_llm
    from .rerank import check_rerank_method, rerank as rerank_passages
    from .report import passages_table, summary_line, usage_table

    check_rerank_method(method)
    corpus = load_corpus(passages_file)
    if corpus.report.kept != corpus.report.read:
        err.print(corpus.report.summary())
    count = len(corpus.passages)
    options: dict[str, Any] = {"keep": top_n, "window": window, "step": step}
    if method == "embedding":  # the LLM-free baseline: nothing to load but the embedder
        from .index import load_embedder

        done = rerank_passages(query, corpus.passages, method, embedder=load_embedder(), **options)
    else:
        progress = StageProgress(err)
        with err.status(f"loading {model or DEFAULT_MODEL}"):
            llm = load_llm(model or DEFAULT_MODEL, backend=backend or "llama.cpp", base_url=base_url or "",
                           api_key=api_key, cache=not no_cache, progress=progress)
        try:
            with progress.bar:
                done = rerank_passages(query, corpus.passages, method, llm=llm, **options)
        finally:
            llm.close()
    ranked, trace = done.ranked, done.trace
    if as_json:
        out.print_json(data={"query": query, "method": method, "results": ranked.to_dicts(),
                             "usage": trace.usage.to_dict(), "trace": trace.to_dict()})
    else:
        out.print(passages_table(ranked, title=f"{method} reranking of {count} passages for {query!r}"))
        out.print(usage_table(trace.stages))
    err.print(summary_line(trace.usage, trace.seconds))


@app.command()
def models() -> None:
    """List the models Winnow knows, their size, and whether they are installed."""
    from .models import format_models_table, list_models

    out.print(format_models_table(list_models()))


@app.command()
def methods() -> None:
    """List the methods, their stages and default settings."""
    from .methods import METHODS

    table = Table(title="Methods", title_justify="left", show_lines=True)
    for column in ("method", "stages", "what it does", "defaults", "agent roles (--agent ROLE=MODEL)"):
        table.add_column(column)
    for name, cls in METHODS.items():
        defaults = "\n".join(f"{k}={v}" for k, v in cls.Settings().to_dict().items())
        roles = "\n".join(f"{role}: {what}" for role, what in cls.roles.items()) or "-"
        table.add_row(name, "\n".join(cls.stages), cls.summary, defaults, roles)
    out.print(table)


# Commands kept in their own modules register themselves on `app` when imported (one line each).
from .commands import COMMAND_MODULES  # noqa: E402

for _module in COMMAND_MODULES:
    __import__(f"{__package__}.commands.{_module}")


def main() -> None:
    try:
        app()
    except WinnowError as exc:
        if STATE["debug"]:
            raise
        # escape: a message may hold brackets (pip install 'winnow[serve]') that rich would take for markup
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    # Run as `python -m winnow.cli`, this file is `__main__`, a second copy of winnow.cli; the command
    # modules registered themselves on the importable `winnow.cli.app`, so run that one.
    from winnow.cli import main as _main

    _main()
