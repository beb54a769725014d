"""`winnow mcp`: the search, rerank and ask tools over the Model Context Protocol (stdio), for agents."""

from __future__ import annotations

from ..extras import require
from ..run_spec import RunOptions, resolve_run
from .common import (
    IndexOption,
    MaxDocumentCharsOption,
    MaxDocumentsOption,
    MaxKOption,
    MaxNOption,
    MaxPendingOption,
    MaxQuestionCharsOption,
    RerankModelOption,
    TimeoutOption,
    app,
    err,
    open_pipeline,
    rerank_models,
    with_run_options,
)


@app.command()
@with_run_options(taken={"--timeout"})  # --timeout is a tool call's deadline; an LLM call's is --llm-timeout
def mcp(
    index_dir: IndexOption,
    options: RunOptions,
    max_pending: MaxPendingOption = 64,
    timeout: TimeoutOption = 600.0,
    max_question_chars: MaxQuestionCharsOption = 2000,
    max_documents: MaxDocumentsOption = 200,
    max_document_chars: MaxDocumentCharsOption = 20_000,
    max_n: MaxNOption = 100,
    max_k: MaxKOption = 50,
    rerank_model: RerankModelOption = None,
) -> None:
    """Serve Model Context Protocol tools (search, rerank, ask) over stdin/stdout for an MCP client.

    The client starts this command itself; stdout carries only protocol messages, notes go to stderr.
    """
    require("mcp", "winnow mcp")
    from ..service import Limits, Service
    from ..service.mcp_server import build_server, stdout_to_stderr

    trained_models = rerank_models(rerank_model)  # checked before any model loads
    spec = resolve_run(options, agents_for_method=False)  # each call chooses its method; mainrag's use the agents
    limits = Limits(max_question_chars=max_question_chars, max_documents=max_documents,
                    max_document_chars=max_document_chars, max_n=max_n, max_k=max_k, max_pending=max_pending,
                    timeout=timeout)
    with stdout_to_stderr():
        pipeline = open_pipeline(spec, index_dir, options)
    service = Service(pipeline, limits=limits, cache=options.cache, rerank_models=trained_models)
    server = build_server(service)
    import logging

    logging.getLogger("winnow.service").setLevel(logging.INFO)  # a cancelled or timed-out call: one line on stderr
    err.print(f"winnow mcp: {spec.method} with {spec.model} over {index_dir}; tools search, rerank, ask on stdio",
              highlight=False, soft_wrap=True)
    try:
        server.run("stdio")
    finally:
        service.close()
        err.print(f"stopped; {service.worker.counts['completed']} LLM jobs served", highlight=False)
