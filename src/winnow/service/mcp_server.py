"""Winnow as Model Context Protocol tools over stdio: ``search``, ``rerank`` and ``ask`` (`winnow mcp`).

An MCP client (Claude Desktop, an IDE's agent, any program using an MCP SDK) starts `winnow mcp` as
a subprocess and calls its tools with JSON arguments. Each tool is a thin adapter over the service
engine (:mod:`winnow.service.engine`), the one behind `winnow serve`: a call is checked against the
same limits (:mod:`winnow.service.limits`: text checks, sizes, typed settings naming the field),
served from the same answer and call caches, and run on the same single model worker under the same
deadline. A call the limits refuse, or that fails with a :class:`~winnow.errors.WinnowError`, comes
back as the MCP tool error (a result with ``isError`` set) whose one line names the argument at
fault; arguments that do not fit the tool's input schema (a wrong type, a number out of bounds, a
method that is not one of the enum's) get one line too (:func:`one_line`), not pydantic's report.

What an agent reads is kept small: the schemas declare the methods and profiles as enums and the
numeric bounds the server enforces, each tool declares its output schema and ``readOnlyHint`` (none
changes anything), and a result's text is compact JSON. ``ask`` answers with the answer, the kept
passages' ids, titles and scores, and the cost; ``full=true`` adds every passage's text and stage
scores, the settings used and the trace. Its answers may run to :data:`ASK_ANSWER_TOKENS` tokens
unless the server's settings, a profile or the call's ``settings`` say otherwise (the methods' own
default, 32, is the papers' short-answer QA budget, which cuts an agent's answers mid-sentence).

stdout is the protocol channel. The SDK's stdio transport points fd 1 at stderr while it serves;
`winnow mcp` does the same while the models load (:func:`stdout_to_stderr`), so llama.cpp's logs, a
library's ``print`` and every progress line land on stderr, never between two protocol messages.
"""

# No `from __future__ import annotations`: the SDK reads each tool's parameter annotations, whose
# descriptions name this server's limits, to make the tool's input schema.
from ..extras import require

require("mcp", "winnow.service.mcp_server (winnow mcp)")

import asyncio  # noqa: E402  (after the check, which names the extra when it fails)
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from functools import partial  # noqa: E402
from typing import Annotated, Any, Iterator, Literal, Optional, Union  # noqa: E402

from mcp.server.mcpserver import Context, MCPServer  # noqa: E402
from mcp.server.mcpserver.exceptions import ToolError  # noqa: E402
from mcp.types import CallToolResult, TextContent, ToolAnnotations  # noqa: E402
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError  # noqa: E402
from starlette.concurrency import run_in_threadpool  # noqa: E402

from ..errors import WinnowError  # noqa: E402
from ..methods import METHODS, PROFILES  # noqa: E402
from ..rerank import RERANK_METHODS  # noqa: E402
from ..version import __version__  # noqa: E402
from .engine import Service  # noqa: E402
from .limits import ApiError, check_unicode  # noqa: E402
from .runner import Emit, execute, open_record  # noqa: E402
from .schemas import AskRequest, RerankDocumentObject, RerankRequest  # noqa: E402

#: The longest answer the ``ask`` tool writes unless told otherwise (within the server's cap on
#: ``max_answer_tokens``): room for a few sentences, where the methods' default of 32 tokens, the
#: papers' budget for short factoid answers, cuts an agent's answers off mid-sentence.
ASK_ANSWER_TOKENS = 256

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
#: None of the tools changes anything: they read the index and ask the model.
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


def one_line(error: ValidationError) -> str:
    """Arguments refused by the tool's input schema, one line naming each (``k``, ``documents[1]``,
    ``settings.n``) and what it must be: what an agent can act on, without pydantic's report and URL."""
    parts = []
    for item in error.errors(include_url=False):
        where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in item["loc"]).lstrip(".")
        where = where or "arguments"
        ctx, kind, given = item.get("ctx") or {}, item["type"], item.get("input")
        got = f" (got {_short(given)})" if kind != "missing" else ""
        if given is None and kind != "missing":  # a client's NaN or infinity is sent as null
            parts.append(f"{where} is null (a NaN or infinite number is sent as null): give a value or leave it out")
        elif kind == "literal_error":
            parts.append(f"{where} must be one of {ctx.get('expected', '')}{got}")
        elif kind in ("greater_than_equal", "less_than_equal"):
            bound = "at least" if kind == "greater_than_equal" else "at most"
            parts.append(f"{where} must be {bound} {ctx.get('ge', ctx.get('le'))}{got}")
        elif kind in ("too_short", "too_long"):
            bound = "at least" if kind == "too_short" else "at most"
            count = ctx.get("min_length", ctx.get("max_length"))
            parts.append(f"{where} must have {bound} {count} item{'s' if count != 1 else ''}"
                         f" (got {ctx.get('actual_length', '?')})")
        elif kind == "missing":
            parts.append(f"{where} is required")
        elif kind == "extra_forbidden":
            parts.append(f"{where} is not an argument of this tool")
        else:
            message = item["msg"][:1].lower() + item["msg"][1:]
            parts.append(f"{where}: {message.replace('input should be', 'must be')}{got}")
    return "; ".join(parts)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def unknown_arguments(name: str, arguments: dict[str, Any], schema: dict[str, Any]) -> str | None:
    """The line refusing arguments tool ``name`` does not take (the SDK would drop them silently,
    so a misspelt ``top_k`` would run with the default), naming them and the ones it takes."""
    taken = list(schema.get("properties", {}))
    unknown = sorted(key for key in arguments if key not in taken)
    if not unknown:
        return None
    verb = "is not an argument" if len(unknown) == 1 else "are not arguments"
    return f"Error executing tool {name}: {', '.join(unknown)} {verb} of this tool (its arguments: {', '.join(taken)})"


def not_finite(arguments: Any, where: str = "") -> str | None:
    """The first NaN or infinite number among ``arguments`` (nested), named as :func:`one_line` names
    a field, or None: JSON has no such numbers, and pydantic's report of one names the wrong type."""
    if isinstance(arguments, float) and not math.isfinite(arguments):
        return f"{where or 'arguments'} must be a finite number (got {arguments!r})"
    items = (arguments.items() if isinstance(arguments, dict)
             else enumerate(arguments) if isinstance(arguments, list) else ())
    for key, value in items:
        if value is None and where in ("settings", "options"):  # what a client's NaN becomes in JSON
            return f"{where}.{key} is null (a NaN or infinite number is sent as null): give a value or leave it out"
        found = not_finite(value, f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}".lstrip("."))
        if found is not None:
            return found
    return None


class WinnowMCPServer(MCPServer):
    """The SDK's server, with arguments its schema refuses reported in one line (:func:`one_line`),
    arguments a tool does not take refused (:func:`unknown_arguments`), and NaN or infinite numbers
    refused naming the argument (:func:`not_finite`)."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        tool = next((tool for tool in await self.list_tools() if tool.name == name), None)
        refusal = None if tool is None else unknown_arguments(name, arguments or {}, tool.input_schema)
        nan = not_finite(arguments or {})
        if refusal is not None or nan is not None:
            raise ToolError(refusal or f"Error executing tool {name}: {nan}")
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(f"Error executing tool {name}: {one_line(exc.__cause__)}") from exc.__cause__
            raise


def compact(body: dict[str, Any]) -> CallToolResult:
    """``body`` as the tool's structured result, and as compact JSON for the text an agent reads."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=body)


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class PassageOut(_Open):
    id: str
    title: str = ""
    score: float
    text: Optional[str] = Field(None, description="The passage (search; ask with full=true).")


class Usage(_Open):
    calls: int = Field(description="LLM calls made (cache hits are free).")
    prompt_tokens: int
    completion_tokens: int


class SearchResult(_Open):
    """What ``search`` returns."""

    retriever: str
    passages: list[PassageOut]


class RerankItem(_Open):
    index: int = Field(description="The document's position in `documents`.")
    relevance_score: float = Field(description="0-1, higher is more relevant.")
    id: Optional[str] = Field(None, description="The document's id, when it was given one.")


class RerankResult(_Open):
    """What ``rerank`` returns."""

    method: str
    results: list[RerankItem]
    usage: Usage


class AskResult(_Open):
    """What ``ask`` returns (``full=true`` adds the passages' text and scores, the settings and the trace)."""

    answer: str
    method: str
    passages: list[PassageOut] = Field(description="The passages the answer was written from, best first.")
    usage: Usage
    served_from: str = Field(description="llm, call-cache or answer-cache.")
    answer_cut_by_token_limit: bool = Field(False, description="The answer reached the max_answer_tokens setting: "
                                                               "ask again with a larger one for the rest.")


def compact_answer(body: dict[str, Any]) -> dict[str, Any]:
    """The ``ask`` result an agent needs: the answer, the passages by id, title and score, the cost."""
    usage = body["usage"]
    out = {"answer": body["answer"], "method": body["method"],
           "passages": [{"id": p["id"], "title": p["title"], "score": p["score"]} for p in body["passages"]],
           "usage": {key: usage[key] for key in ("calls", "prompt_tokens", "completion_tokens", "cache_hits")
                     if key in usage},
           "served_from": body["served_from"]}
    if body.get("answer_cut_by_token_limit"):
        out["answer_cut_by_token_limit"] = True
    return out


def build_server(service: Service) -> MCPServer:
    """The MCP server whose tools run on ``service`` (its pipeline, limits, caches and worker)."""
    server: MCPServer = WinnowMCPServer("winnow", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    # The choices as enums and the limits as bounds, in the schema an agent reads before calling.
    add_search_tool(server, service)
    add_rerank_tool(server, service)
    add_ask_tool(server, service)
    return server


def add_search_tool(server: MCPServer, service: Service) -> None:
    """The ``search`` tool: first-stage retrieval alone."""
    limits = service.limits
    search_k = min(10, limits.max_n)

    @server.tool(title="Search the index", annotations=READ_ONLY,
                 description=f"First-stage retrieval alone ({service.pipeline.retriever_name} over the index): "
                             f"the best k passages for the query, each with its id, title, text and score.")
    async def search(
        query: Annotated[StrictStr, Field(description=f"What to search for (at most {limits.max_question_chars} "
                                                      f"characters).")],
        k: Annotated[StrictInt, Field(ge=1, le=limits.max_n, description=f"How many passages (at most "
                                                                         f"{limits.max_n}).")] = search_k,
    ) -> Annotated[CallToolResult, SearchResult]:
        with tool_errors():
            found = await run_in_threadpool(partial(service.search, query, k, query_field="query"))
        return compact({"retriever": found["retriever"],
                        "passages": [{"id": p["id"], "title": p["title"], "text": p["text"], "score": p["score"]}
                                     for p in found["passages"]]})


def add_rerank_tool(server: MCPServer, service: Service) -> None:
    """The ``rerank`` tool: the caller's documents reranked by a rerank method."""
    limits = service.limits
    rerank_method = Literal[tuple(RERANK_METHODS)]  # type: ignore[valid-type]
    rerank_methods = "; ".join(f"{name}: {summary}" for name, summary in RERANK_METHODS.items())

    @server.tool(title="Rerank documents", annotations=READ_ONLY,
                 description="Rerank your documents for a query with the model. Results are best first, each "
                             "with its index in `documents` (and its id when you gave one) and a relevance "
                             "score on a 0-1 scale; `usage` counts the LLM calls and tokens.")
    async def rerank(
        query: Annotated[StrictStr, Field(description="The query the documents are ranked for.")],
        documents: Annotated[Documents, Field(min_length=1, max_length=limits.max_documents,
                                              description=f"Texts, or objects {{id, title, text}}, in your first "
                                                          f"stage's order (each at most "
                                                          f"{limits.max_document_chars} characters).")],
        method: Annotated[rerank_method, Field(description=rerank_methods)] = "pointwise",  # type: ignore[valid-type]
        top_n: Annotated[Optional[StrictInt], Field(ge=1, le=limits.max_documents,
                                                    description="Return only the best top_n.")] = None,
        options: Annotated[Optional[dict[str, Any]], Field(description="listwise only: window (default 10) and "
                                                                       "step (default 5).")] = None,
        context: Optional[Context] = None,
    ) -> Annotated[CallToolResult, RerankResult]:
        with tool_errors():
            check_unicode({"query": query, "documents": documents, "method": method, "options": options})
            request = RerankRequest.model_validate({"query": query, "documents": documents, "method": method,
                                                    "top_n": top_n, "options": options or {}})
            plan = service.plan_rerank(request)
            body = await execute(service, plan, open_record(service, plan),
                                 progress_to(context) if context else None)
        results = []
        for result in body["results"]:
            document = documents[result["index"]]
            item = {"index": result["index"], "relevance_score": result["relevance_score"]}
            if isinstance(document, RerankDocumentObject) and document.id is not None:
                item["id"] = str(document.id)
            results.append(item)
        usage = body["usage"]
        return compact({"method": body["method"], "results": results,
                        "usage": {key: usage[key] for key in ("calls", "prompt_tokens", "completion_tokens",
                                                              "cache_hits") if key in usage},
                        "served_from": body.get("served_from", "")})


def add_ask_tool(server: MCPServer, service: Service) -> None:
    """The ``ask`` tool: a question answered by a method over the index."""
    limits = service.limits
    method_name = Literal[tuple(METHODS)]  # type: ignore[valid-type]
    profile_name = Literal[tuple(PROFILES)]  # type: ignore[valid-type]
    answer_cap = limits.setting_caps.get("max_answer_tokens", ASK_ANSWER_TOKENS)
    answer_tokens = min(ASK_ANSWER_TOKENS, answer_cap)
    methods = "; ".join(f"{name}: {cls.summary}" for name, cls in METHODS.items())
    answer_default = "max_answer_tokens" not in service.pipeline.spec.settings  # the server's own value wins

    @server.tool(title="Answer a question", annotations=READ_ONLY,
                 description="Answer a question with a Winnow method over the index: retrieve N passages, let the "
                             "model rerank or filter them, answer from the k that survive. Returns the answer, "
                             "the passages it kept (id, title, score) and `usage`: the LLM calls and tokens the "
                             "answer cost; full=true adds the passages' text, every stage's score, the settings "
                             "used and the trace.")
    async def ask(
        question: Annotated[StrictStr, Field(description=f"The question (at most {limits.max_question_chars} "
                                                         f"characters).")],
        method: Annotated[method_name, Field(description=methods)] = service.pipeline.spec.method,  # type: ignore[valid-type]
        settings: Annotated[Optional[dict[str, Any]], Field(
            description=f"Method settings, e.g. {{\"n\": 10, \"k\": 3, \"max_answer_tokens\": 64}} "
                        f"(answers may run to {answer_tokens} tokens unless a profile or this says otherwise); "
                        "an unknown one is refused with the method's list.",
            json_schema_extra={"properties": {
                "n": {"type": "integer", "minimum": 1, "maximum": limits.max_n,
                      "description": "Passages to retrieve."},
                "k": {"type": "integer", "minimum": 1, "maximum": limits.max_n,
                      "description": "Passages to answer from (at most n)."},
                "max_answer_tokens": {"type": "integer", "minimum": 0, "maximum": answer_cap,
                                      "description": "Longest answer, in tokens."},
                "task": {"enum": ["qa", "fever", "conversational"],
                         "description": "conversational to answer with a history (rankrag, vanilla)."}}})]
            = None,
        history: Annotated[Optional[list[dict[str, str]]], Field(
            description="The dialogue's earlier turns, oldest first, as {\"role\": \"user\"|\"assistant\", "
                        "\"text\": ...}, opening with the user and alternating; needs settings.task = "
                        "\"conversational\" (rankrag, vanilla).")] = None,
        profile: Annotated[Optional[profile_name], Field(description="Start from a named preset of settings "  # type: ignore[valid-type]
                                                                     "(\"paper\": the papers' values); settings "
                                                                     "override it.")] = None,
        full: Annotated[StrictBool, Field(description="Also return every passage's text and stage scores, the "
                                                      "settings used and the trace.")] = False,
        context: Optional[Context] = None,
    ) -> Annotated[CallToolResult, AskResult]:
        chosen = dict(settings or {}) if isinstance(settings, dict) else settings
        if answer_default and profile is None and isinstance(chosen, dict) and "max_answer_tokens" not in chosen:
            chosen["max_answer_tokens"] = answer_tokens
        with tool_errors():
            check_unicode({"question": question, "method": method, "settings": settings, "history": history,
                           "profile": profile})
            request = AskRequest.model_validate({"question": question, "method": method, "options": chosen or {},
                                                 "history": history or [], "profile": profile,
                                                 "include_trace": full})
            plan = service.plan_ask(request, container="settings")
            body = await execute(service, plan, open_record(service, plan),
                                 progress_to(context) if context else None)
        return compact(body if full else compact_answer(body))
