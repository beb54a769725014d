"""`winnow mcp`: the search, rerank and ask tools over the Model Context Protocol (stdio), for agents."""

from __future__ import annotations

import logging
import os
from typing import Annotated, Optional

import typer

from ..extras import require
from .common import (
    AgentOption,
    ApiKeyOption,
    BackendOption,
    BaseUrlOption,
    ConfigOption,
    ContextSizeOption,
    FinalModelOption,
    IndexOption,
    JudgeModelOption,
    KOption,
    MaxDocumentCharsOption,
    MaxDocumentsOption,
    MaxInflightOption,
    MaxKOption,
    MaxNOption,
    MaxPendingOption,
    MaxQuestionCharsOption,
    ModelOption,
    NoCacheOption,
    NOption,
    RetrieverOption,
    SetOption,
    ThreadsOption,
    TimeoutOption,
    app,
    err,
    resolve_run,
    spinner_while_loading,
)


@app.command()
def mcp(
    index_dir: IndexOption,
    method: Annotated[Optional[str], typer.Option("--method", "-m", help="Default method of the ask tool "
                                                                          "(default rankrag).")] = None,
    model: ModelOption = None,
    backend: BackendOption = None,
    base_url: BaseUrlOption = None,
    max_inflight: MaxInflightOption = None,
    api_key: ApiKeyOption = "",
    retriever: RetrieverOption = None,
    n: NOption = None,
    k: KOption = None,
    judge_model: JudgeModelOption = None,
    final_model: FinalModelOption = None,
    agents: AgentOption = None,
    context_size: ContextSizeOption = None,
    assignments: SetOption = None,
    config: ConfigOption = None,
    threads: ThreadsOption = None,
    max_pending: MaxPendingOption = 64,
    timeout: TimeoutOption = 600.0,
    max_question_chars: MaxQuestionCharsOption = 2000,
    max_documents: MaxDocumentsOption = 200,
    max_document_chars: MaxDocumentCharsOption = 20_000,
    max_n: MaxNOption = 100,
    max_k: MaxKOption = 50,
    no_cache: NoCacheOption = False,
) -> None:
    """Serve Model Context Protocol tools (search, rerank, ask) over stdin/stdout for an MCP client.

    The client starts this command itself; stdout carries only protocol messages, notes go to stderr.
    """
    require("mcp", "winnow mcp")
    from ..pipeline import Pipeline
    from ..service import Limits, Service
    from ..service.mcp_server import build_server, stdout_to_stderr

    spec = resolve_run(config, assignments, agents=agents, context_size=context_size, method=method, model=model,
                       backend=backend, base_url=base_url, max_inflight=max_inflight, retriever=retriever,
                       judge_model=judge_model, final_model=final_model, n=n, k=k,
                       agents_for_method=False)  # each call chooses its method; mainrag's use the agents
    limits = Limits(max_question_chars=max_question_chars, max_documents=max_documents,
                    max_document_chars=max_document_chars, max_n=max_n, max_k=max_k, max_pending=max_pending,
                    timeout=timeout)
    with stdout_to_stderr(), spinner_while_loading(spec.backend) as loading:
        pipeline = Pipeline(spec, index_dir, api_key=api_key or os.environ.get("WINNOW_OPENAI_API_KEY", ""),
                            cache=not no_cache, loading=loading, threads=threads)
    service = Service(pipeline, limits=limits, cache=not no_cache)
    server = build_server(service)
    logging.getLogger("winnow.service").setLevel(logging.INFO)  # a cancelled or timed-out call: one line on stderr
    err.print(f"winnow mcp: {spec.method} with {spec.model} over {index_dir}; tools search, rerank, ask on stdio",
              highlight=False, soft_wrap=True)
    try:
        server.run("stdio")
    finally:
        service.close()
        err.print(f"stopped; {service.worker.counts['completed']} LLM jobs served", highlight=False)
