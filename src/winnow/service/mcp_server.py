"""Winnow as Model Context Protocol tools over stdio: ``search``, ``rerank`` and ``ask`` (`winnow mcp`).

An MCP client (Claude Desktop, an IDE's agent, any program using an MCP SDK) starts `winnow mcp` as
a subprocess and calls its tools with JSON arguments. Each tool is a thin adapter over the service
engine (:mod:`winnow.service.engine`), the one behind `winnow serve`: a call is checked against the
same limits (:mod:`winnow.service.limits`: text checks, sizes, typed settings naming the field),
served from the same answer and call caches, and run on the same single model worker under the same
deadline. A call the limits refuse, or that fails with a :class:`~winnow.errors.WinnowError`, comes
back as the MCP tool error (a result with ``isError`` set) whose one line names the argument at
fault; arguments of the wrong type are refused by the SDK against the tool's input schema.

stdout is the protocol channel. The SDK's stdio transport points fd 1 at stderr while it serves;
`winnow mcp` does the same while the models load (:func:`stdout_to_stderr`), so llama.cpp's logs, a
library's ``print`` and every progress line land on stderr, never between two protocol messages.
"""

# No `from __future__ import annotations`: the SDK reads each tool's parameter annotations, whose
# descriptions name this server's limits, to make the tool's input schema.
from ..extras import require

require("mcp", "winnow.service.mcp_server (winnow mcp)")

import asyncio  # noqa: E402  (after the check, which names the extra when it fails)
import os  # noqa: E402
import sys  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from functools import partial  # noqa: E402
from typing import Annotated, Any, Iterator, Optional, Union  # noqa: E402

from mcp.server.mcpserver import Context, MCPServer  # noqa: E402
from mcp.server.mcpserver.exceptions import ToolError  # noqa: E402
from pydantic import Field, StrictInt, StrictStr  # noqa: E402
from starlette.concurrency import run_in_threadpool  # noqa: E402

from ..errors import WinnowError  # noqa: E402
from ..methods import METHODS  # noqa: E402
from ..rerank import RERANK_METHODS  # noqa: E402
from ..version import __version__  # noqa: E402
from .engine import Service  # noqa: E402
from .limits import ApiError, check_unicode  # noqa: E402
from .runner import Emit, execute, open_record  # noqa: E402
from .schemas import AskRequest, RerankDocumentObject, RerankRequest  # noqa: E402

INSTRUCTIONS = ("Winnow: retrieval-augmented generation with an LLM in the loop. `search` retrieves passages from "
                "the index; `rerank` orders your own passages for a query; `ask` answers a question with a "
                "whole method (retrieve, rerank or filter with the LLM, answer from what survives) and returns "
                "the passages it kept and what the answer cost.")


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Point fd 1 at stderr until the block ends, so what native code or a library writes to stdout
    meanwhile (llama.cpp loading a model) cannot reach an MCP client reading protocol messages there."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()  # what Python buffered goes to stderr too, before fd 1 is the client's again
        os.dup2(saved, 1)
        os.close(saved)


@contextmanager
def tool_errors() -> Iterator[None]:
    """A refused or failed request as the MCP tool error, one line naming the argument at fault."""
    try:
        yield
    except ApiError as exc:
        named = exc.field and exc.field not in exc.message
        raise ToolError(f"{exc.field}: {exc.message}" if named else exc.message) from exc
    except WinnowError as exc:
        raise ToolError(str(exc)) from exc


def progress_to(context: Context) -> Emit:
    """The worker's progress events (``stage``, ``done``, ``total`` per stage's LLM calls) as MCP
    progress notifications, which the SDK sends only to a client that asked for progress on the call.
    MCP's progress must grow with every notification, while each stage counts from 1 again: the
    progress sent is the LLM calls finished over all stages so far, the message names the stage."""
    loop = asyncio.get_running_loop()
    last_done: dict[str, int] = {}  # per stage, the count it last reported
    calls = 0

    def emit(event: dict[str, Any]) -> None:  # called on the worker thread
        nonlocal calls
        if event["event"] != "progress":
            return
        stage, done = event["stage"], event["done"]
        before = last_done.get(stage, 0)
        last_done[stage] = done
        new = done - before if done >= before else done  # a stage run again (RRR's next round) counts from 0
        if new > 0:
            calls += new
            note = context.report_progress(calls, None, f"LLM {stage} {done}/{event['total']}")
            asyncio.run_coroutine_threadsafe(note, loop)

    return emit


Documents = list[Union[StrictStr, RerankDocumentObject]]


def build_server(service: Service) -> MCPServer:
    """The MCP server whose tools run on ``service`` (its pipeline, limits, caches and worker)."""
    limits = service.limits
    server: MCPServer = MCPServer("winnow", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")

    @server.tool(description=f"First-stage retrieval alone ({service.pipeline.retriever_name} over the index): "
                             f"the best k passages for the query, each with its id, title, text and score.")
    async def search(
        query: Annotated[StrictStr, Field(description=f"What to search for (at most {limits.max_question_chars} "
                                                      f"characters).")],
        k: Annotated[Optional[StrictInt], Field(description=f"How many passages (default {min(10, limits.max_n)}, "
                                                            f"at most {limits.max_n}).")] = None,
    ) -> dict[str, Any]:
        with tool_errors():
            return await run_in_threadpool(partial(service.search, query, k, query_field="query"))

    rerank_methods = "; ".join(f"{name}: {summary}" for name, summary in RERANK_METHODS.items())

    @server.tool(description="Rerank your documents for a query with the model. Results are best first, each "
                             "with its index in `documents` (and its id when you gave one) and a relevance "
                             "score on a 0-1 scale; `usage` counts the LLM calls and tokens.")
    async def rerank(
        query: Annotated[StrictStr, Field(description="The query the documents are ranked for.")],
        documents: Annotated[Documents, Field(description=f"Texts, or objects {{id, title, text}}, in your "
                                                          f"first stage's order (at most {limits.max_documents}, "
                                                          f"each at most {limits.max_document_chars} "
                                                          f"characters).")],
        method: Annotated[Optional[StrictStr], Field(description=f"Default pointwise. {rerank_methods}.")] = None,
        top_n: Annotated[Optional[StrictInt], Field(description="Return only the best top_n.")] = None,
        options: Annotated[Optional[dict[str, Any]], Field(description="listwise only: window (default 10) and "
                                                                       "step (default 5).")] = None,
        context: Optional[Context] = None,
    ) -> dict[str, Any]:
        with tool_errors():
            check_unicode({"query": query, "documents": documents, "method": method, "options": options})
            request = RerankRequest.model_validate({"query": query, "documents": documents, "method": method,
                                                    "top_n": top_n, "options": options or {}})
            plan = service.plan_rerank(request)
            body = await execute(service, plan, open_record(service, plan),
                                 progress_to(context) if context else None)
        for result in body["results"]:
            document = documents[result["index"]]
            if isinstance(document, RerankDocumentObject) and document.id is not None:
                result["id"] = str(document.id)
        return body

    methods = "; ".join(f"{name}: {cls.summary}" for name, cls in METHODS.items())

    @server.tool(description="Answer a question with a Winnow method over the index: retrieve N passages, let the "
                             "model rerank or filter them, answer from the k that survive. Returns the answer, "
                             "the passages it kept (with every stage's score), the settings used and `usage`: "
                             "the LLM calls and tokens the answer cost.")
    async def ask(
        question: Annotated[StrictStr, Field(description=f"The question (at most {limits.max_question_chars} "
                                                         f"characters).")],
        method: Annotated[Optional[StrictStr], Field(description=f"Default {service.pipeline.spec.method}. "
                                                                 f"{methods}.")] = None,
        settings: Annotated[Optional[dict[str, Any]], Field(description="Method settings, e.g. {\"n\": 10, \"k\": 3,"
                                                                        " \"max_answer_tokens\": 64}; an unknown "
                                                                        "one is refused with the method's list.")]
            = None,
        history: Annotated[Optional[list[dict[str, str]]], Field(
            description="The dialogue's earlier turns, oldest first, as {\"role\": \"user\"|\"assistant\", "
                        "\"text\": ...}, opening with the user and alternating; needs settings.task = "
                        "\"conversational\" (rankrag, vanilla).")] = None,
        context: Optional[Context] = None,
    ) -> dict[str, Any]:
        with tool_errors():
            check_unicode({"question": question, "method": method, "settings": settings, "history": history})
            request = AskRequest.model_validate({"question": question, "method": method, "options": settings or {},
                                                 "history": history or []})
            plan = service.plan_ask(request, container="settings")
            return await execute(service, plan, open_record(service, plan),
                                 progress_to(context) if context else None)

    return server
