"""``winnow ask`` and ``winnow rerank``: a method answers a question; a reranker orders your passages."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..pipeline import DEFAULT_MODEL
from ..text import check_text
from .common import (
    AgentOption,
    ApiKeyOption,
    BackendOption,
    BaseUrlOption,
    CallTimeoutOption,
    ConfigOption,
    ContextSizeOption,
    FinalModelOption,
    FramingOption,
    FusionAlphaOption,
    HistoryOption,
    IndexOption,
    JsonOption,
    JudgeModelOption,
    KOption,
    MaxAnswerTokensOption,
    MaxInflightOption,
    MethodOption,
    ModelOption,
    NoCacheOption,
    NOption,
    ProfileOption,
    RetrieverOption,
    SetOption,
    SlotsOption,
    StageProgress,
    TaskOption,
    TurnOption,
    app,
    dialogue_from,
    err,
    out,
    resolve_run,
    spinner_while_loading,
)


@app.command()
def ask(
    question: Annotated[str, typer.Argument(help="The question.")],
    index_dir: IndexOption,
    method: MethodOption = None,
    model: ModelOption = None,
    backend: BackendOption = None,
    base_url: BaseUrlOption = None,
    max_inflight: MaxInflightOption = None,
    timeout: CallTimeoutOption = None,
    slots: SlotsOption = None,
    api_key: ApiKeyOption = "",
    retriever: RetrieverOption = None,
    n: NOption = None,
    k: KOption = None,
    fusion_alpha: FusionAlphaOption = None,
    max_answer_tokens: MaxAnswerTokensOption = None,
    context_size: ContextSizeOption = None,
    framing: FramingOption = None,
    task: TaskOption = None,
    turns: TurnOption = None,
    history: HistoryOption = None,
    judge_model: JudgeModelOption = None,
    final_model: FinalModelOption = None,
    agents: AgentOption = None,
    assignments: SetOption = None,
    config: ConfigOption = None,
    profile: ProfileOption = None,
    no_cache: NoCacheOption = False,
    as_json: JsonOption = False,
) -> None:
    """Answer QUESTION from the index with a method, showing how each stage ranked the passages."""
    from ..methods import method_settings
    from ..methods.base import check_dialogue
    from ..pipeline import Pipeline
    from ..records import Query
    from ..report import print_answer, summary_line

    check_text(question, "the question")
    dialogue = dialogue_from(turns, history)
    spec = resolve_run(config, assignments, profile=profile,
                       agents=agents, method=method, model=model, backend=backend,
                       base_url=base_url, max_inflight=max_inflight, timeout=timeout, slots=slots, retriever=retriever,
                       judge_model=judge_model,
                       final_model=final_model, n=n, k=k, fusion_alpha=fusion_alpha,
                       max_answer_tokens=max_answer_tokens, context_size=context_size, framing=framing, task=task)
    check_dialogue(method_settings(spec.method, **spec.settings), 1 if dialogue else 0)  # before loading a model
    progress = StageProgress(err)
    with spinner_while_loading(spec.backend) as loading:
        pipeline = Pipeline(spec, index_dir, api_key=api_key, cache=not no_cache, progress=progress, loading=loading)
    with pipeline, progress.bar:
        answer = pipeline.ask(Query(question, history=dialogue))
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
    max_inflight: MaxInflightOption = None,
    slots: SlotsOption = None,
    api_key: ApiKeyOption = "",
    top_n: Annotated[Optional[int], typer.Option("--top-n", help="Keep only the best N.")] = None,
    window: Annotated[int, typer.Option("--window", help="listwise: window size.")] = 10,
    step: Annotated[int, typer.Option("--step", help="listwise: step.")] = 5,
    no_cache: NoCacheOption = False,
    as_json: JsonOption = False,
) -> None:
    """Rerank the passages of a JSONL file for QUERY: Winnow as a reranker in your own pipeline."""
    from ..corpus import load_corpus
    from ..llm import load_llm
    from ..report import passages_table, summary_line, usage_table
    from ..rerank import check_rerank_method
    from ..rerank import rerank as rerank_passages

    check_text(query, "the query")
    check_rerank_method(method)
    corpus = load_corpus(passages_file)
    if corpus.report.kept != corpus.report.read:
        err.print(corpus.report.summary())
    count = len(corpus.passages)
    options: dict[str, Any] = {"keep": top_n, "window": window, "step": step}
    if method == "embedding":  # the LLM-free baseline: nothing to load but the embedder
        from ..index import load_embedder

        done = rerank_passages(query, corpus.passages, method, embedder=load_embedder(), **options)
    else:
        progress = StageProgress(err)
        with err.status(f"loading {model or DEFAULT_MODEL}"):
            llm = load_llm(model or DEFAULT_MODEL, backend=backend or "llama.cpp", base_url=base_url or "",
                           api_key=api_key, cache=not no_cache, progress=progress, max_inflight=max_inflight,
                           slots=slots)
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
