"""`winnow mcp`, through the official MCP SDK's stdio client, against the real smollm2-135m.

One server process (`python -m winnow mcp`, started once for the module: loading the model is the
slow part) over a real BM25 index of tests/small_corpus.py answers every test here, in file order.
It runs with small limits, so the over-long and too-many cases are cheap and show the flags are
honoured. The client session lives in an anyio blocking portal (a thread with its own event loop)
so that plain synchronous tests can share it. Every line the server wrote to stdout must have been
a protocol message (the session records any line that was not), and its stderr, kept in a file,
must hold no traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
from anyio.from_thread import start_blocking_portal
from fast_model import suite_model
from mcp import ClientSession, StdioServerParameters, stdio_client
from service_server import build_small_index
from small_corpus import PASSAGES

from winnow.index import BM25Index
from winnow.methods import METHODS
from winnow.records import Passage
from winnow.rerank import relevance_score, rerank

MODEL = suite_model()

pytestmark = [pytest.mark.llm, pytest.mark.subprocess]  # `winnow mcp` in a process of its own

SRC = Path(__file__).resolve().parents[1] / "src"
CORPUS = {p["id"]: p for p in PASSAGES}
LIMITS = {"--max-question-chars": 200, "--max-documents": 4, "--max-document-chars": 300, "--max-n": 8}
QUESTION = "Which city is the capital of France?"  # four passages match it: N=4 retrieves four
TINY = {"n": 4, "k": 2, "max_answer_tokens": 8}  # short answers: the tests check plumbing, not prose
RERANK_QUERY = "What is the capital of Italy?"
RERANK_DOCS = ["The Nile is a major river in northeastern Africa.",
               {"id": "rome-1", "title": "Rome", "text": "Rome is the capital city of Italy."},
               "A banana is an elongated, edible fruit produced by plants."]


class Client:
    """The SDK's client session to the server, called from synchronous tests through the portal."""

    def __init__(self, portal: Any, session: Any, faults: list[Exception], stderr: Path, index_dir: Path) -> None:
        self.portal = portal
        self.session = session
        self.faults = faults  # stdout lines that were not protocol messages, as the SDK reported them
        self.stderr = stderr
        self.index_dir = index_dir

    def call(self, tool: str, arguments: dict[str, Any], progress: list[tuple[float, float | None, str | None]]
             | None = None) -> Any:
        async def record(done: float, total: float | None, message: str | None) -> None:
            if progress is not None:
                progress.append((done, total, message))

        return self.portal.call(lambda: self.session.call_tool(tool, arguments, progress_callback=record))

    def result(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The structured result of a call that must succeed."""
        answer = self.call(tool, arguments)
        assert not answer.is_error, answer.content
        assert json.loads(answer.content[0].text) == answer.structured_content  # text and structure agree
        return answer.structured_content

    def error(self, tool: str, arguments: dict[str, Any]) -> str:
        """The message of a call that must fail as a tool error."""
        answer = self.call(tool, arguments)
        assert answer.is_error, answer.structured_content
        assert len(answer.content) == 1
        return answer.content[0].text


@asynccontextmanager
async def session_to(index_dir: Path, cache_dir: Path, stderr: Path, faults: list[Exception]) -> AsyncIterator[Any]:
    async def on_message(message: Any) -> None:
        if isinstance(message, Exception):
            faults.append(message)

    args = ["-m", "winnow", "mcp", "--index", str(index_dir), "--model", MODEL, "--threads", "1",
            *[str(part) for option, value in LIMITS.items() for part in (option, value)]]
    env = dict(os.environ, WINNOW_CACHE_DIR=str(cache_dir),
               PYTHONPATH=os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])]))
    server = StdioServerParameters(command=sys.executable, args=args, env=env)
    with stderr.open("w") as errlog:
        async with stdio_client(server, errlog=errlog) as (read, write):
            async with ClientSession(read, write, message_handler=on_message, read_timeout_seconds=120) as session:
                await session.initialize()
                yield session


@pytest.fixture(scope="module")
def client(tmp_path_factory) -> Any:
    folder = tmp_path_factory.mktemp("mcp")
    faults: list[Exception] = []
    stderr = folder / "server-stderr.txt"
    index_dir = build_small_index(folder)
    with start_blocking_portal() as portal:
        with portal.wrap_async_context_manager(session_to(index_dir, folder / "cache", stderr, faults)) as session:
            yield Client(portal, session, faults, stderr, index_dir)


def enum_of(schema: dict[str, Any]) -> list[Any]:
    """The enum of a property, itself or its one non-null alternative (an optional argument)."""
    if "enum" in schema:
        return schema["enum"]
    return next(s["enum"] for s in schema["anyOf"] if "enum" in s)


def test_the_three_tools_and_their_input_schemas(client):
    tools = {tool.name: tool for tool in client.portal.call(client.session.list_tools).tools}
    assert set(tools) == {"search", "rerank", "ask"}
    schemas = {name: tool.input_schema for name, tool in tools.items()}
    assert set(schemas["search"]["properties"]) == {"query", "k"} and schemas["search"]["required"] == ["query"]
    assert set(schemas["rerank"]["properties"]) == {"query", "documents", "method", "top_n", "options"}
    assert schemas["rerank"]["required"] == ["query", "documents"]
    assert set(schemas["ask"]["properties"]) == {"question", "method", "settings", "history", "profile", "full"}
    assert schemas["ask"]["required"] == ["question"]
    assert "context" not in schemas["ask"]["properties"]  # the SDK's context is injected, not asked for
    ask, search, rerank_ = schemas["ask"]["properties"], schemas["search"]["properties"], schemas["rerank"]["properties"]
    # The choices as enums, the server's limits as bounds.
    assert enum_of(ask["method"]) == list(METHODS)  # every registered method, in the registry's order
    assert ask["method"]["default"] == "rankrag"  # the server's --method
    assert "paper" in enum_of(ask["profile"]) and "paper-70b" in enum_of(ask["profile"])
    assert enum_of(rerank_["method"]) == ["pointwise", "graded", "listwise", "embedding", "cross-encoder", "monot5"]
    assert (search["k"]["minimum"], search["k"]["maximum"], search["k"]["default"]) == (1, 8, 8)
    assert (rerank_["documents"]["minItems"], rerank_["documents"]["maxItems"]) == (1, 4)
    assert ask["settings"]["properties"]["n"]["maximum"] == 8
    assert ask["settings"]["properties"]["max_answer_tokens"]["maximum"] == 512
    assert "at most 200 characters" in ask["question"]["description"]
    # Read-only tools, each with its output schema.
    for tool in tools.values():
        assert tool.annotations.read_only_hint is True and tool.annotations.destructive_hint is False
    assert {"answer", "passages", "usage"} <= set(tools["ask"].output_schema["properties"])
    assert {"results", "usage"} <= set(tools["rerank"].output_schema["properties"])
    assert {"passages"} <= set(tools["search"].output_schema["properties"])
    for method in ("vanilla", "rankrag", "mainrag", "rrr", "rankgpt"):
        assert method in schemas["ask"]["properties"]["method"]["description"]
    for method in ("pointwise", "graded", "listwise", "embedding", "cross-encoder", "monot5"):
        assert method in schemas["rerank"]["properties"]["method"]["description"]


def test_search_is_the_index_retriever(client):
    found = client.result("search", {"query": "capital city", "k": 3})
    assert found["retriever"] == "bm25"
    expected = BM25Index.open(client.index_dir).search("capital city", k=3).to_dicts()  # the same index, here
    assert len(found["passages"]) == 3 and [p["id"] for p in found["passages"]] == [p["id"] for p in expected]
    assert [p["score"] for p in found["passages"]] == pytest.approx([p["score"] for p in expected])
    for passage in found["passages"]:
        assert passage["text"] == CORPUS[passage["id"]]["text"]


def test_rerank_agrees_with_winnow_rerank(client, llm):
    body = client.result("rerank", {"query": RERANK_QUERY, "documents": RERANK_DOCS})
    passages = [Passage(str(i), doc) if isinstance(doc, str) else Passage(str(i), doc["text"], doc["title"])
                for i, doc in enumerate(RERANK_DOCS)]
    local = rerank(RERANK_QUERY, passages, "pointwise", llm=llm)  # the same model, in this process
    expected = [(int(c.passage.id), relevance_score("pointwise", c.score, rank, len(passages)))
                for rank, c in enumerate(local.ranked, start=1)]
    assert [r["index"] for r in body["results"]] == [index for index, _ in expected]
    assert [r["relevance_score"] for r in body["results"]] == pytest.approx([s for _, s in expected], abs=1e-4)
    assert next(r for r in body["results"] if r["index"] == 1)["id"] == "rome-1"  # the id it was given
    assert all("id" not in r for r in body["results"] if r["index"] != 1)  # plain texts have none
    assert body["method"] == "pointwise" and body["usage"]["calls"] == len(RERANK_DOCS)


def test_rerank_top_n_and_listwise_options(client):
    body = client.result("rerank", {"query": RERANK_QUERY, "documents": RERANK_DOCS, "method": "listwise",
                                    "top_n": 2, "options": {"window": 3, "step": 1}})
    assert body["method"] == "listwise" and len(body["results"]) == 2
    assert [r["relevance_score"] for r in body["results"]] == [1.0, pytest.approx(2 / 3)]  # 1 - (rank - 1) / n


def test_ask_answers_with_the_kept_passages_and_the_cost(client):
    progress: list[tuple[float, float | None, str | None]] = []
    answer = client.call("ask", {"question": QUESTION, "settings": TINY, "full": True}, progress)
    assert not answer.is_error, answer.content
    body = answer.structured_content
    assert "trace" in body and body["trace"]["stages"]  # full: the trace too
    assert body["method"] == "rankrag" and body["answer"].strip()
    assert body["settings"]["n"] == 4 and body["settings"]["k"] == 2 and body["settings"]["max_answer_tokens"] == 8
    assert len(body["passages"]) == 2 and {p["id"] for p in body["passages"]} <= {"paris", "france", "rome", "berlin"}
    assert all(p["text"] == CORPUS[p["id"]]["text"] for p in body["passages"])
    assert [s["stage"] for s in body["passages"][0]["scores"]][0] == "bm25"  # every stage's score, first first
    # RankRAG §4.3: one P("True") per retrieved passage, then one answer.
    assert body["usage"]["calls"] == 4 + 1 and body["usage"]["prompt_tokens"] > 0
    assert body["usage"]["completion_tokens"] > 0 and body["served_from"] == "llm"
    # A notification as LLM calls finish: calls over all stages so far, growing as MCP requires.
    assert progress and all(message and message.startswith("LLM ") for _, _, message in progress)
    assert [done for done, _, _ in progress] == sorted({done for done, _, _ in progress})
    assert progress[-1][0] <= body["usage"]["calls"]
    again = client.result("ask", {"question": QUESTION, "settings": TINY})
    assert again["served_from"] == "answer-cache" and again["answer"] == body["answer"]
    # By default the result is what an agent needs, as compact JSON: no text, no trace, no indentation.
    assert set(again) <= {"answer", "method", "passages", "usage", "served_from", "answer_cut_by_token_limit"}
    assert [set(p) for p in again["passages"]] == [{"id", "title", "score"}] * 2
    text = client.call("ask", {"question": QUESTION, "settings": TINY}).content[0].text
    assert "\n" not in text and ": " not in text.replace(body["answer"], "") and len(text) < 600


def test_ask_answers_run_past_32_tokens_by_default(client):
    body = client.result("ask", {"question": "Which planet is the largest?", "method": "vanilla",
                                 "settings": {"k": 1}, "full": True})
    assert body["settings"]["max_answer_tokens"] == 256  # the MCP tool's default, not the methods' 32
    assert body["usage"]["calls"] == 1


def test_ask_carries_a_dialogue_history_into_the_prompt(client):
    settings = {"k": 1, "max_answer_tokens": 4, "task": "conversational"}
    alone = client.result("ask", {"question": "What is it made of?", "method": "vanilla", "settings": settings})
    history = [{"role": "user", "text": "Which planet is the largest?"}, {"role": "assistant", "text": "Jupiter."}]
    talk = client.result("ask", {"question": "What is it made of?", "method": "vanilla", "history": history,
                                 "settings": settings})
    # Another request, not the cached answer of the question alone, and the turns are in its prompt.
    assert talk["served_from"] == "llm"
    assert talk["usage"]["prompt_tokens"] > alone["usage"]["prompt_tokens"] + 8


def test_ask_with_another_method(client):
    body = client.result("ask", {"question": "Which planet is the largest?", "method": "vanilla",
                                 "settings": {"k": 2, "max_answer_tokens": 4}})
    assert body["method"] == "vanilla" and body["usage"]["calls"] == 1  # vanilla: the answer alone
    assert body["passages"][0]["id"] == "jupiter"


BAD = [  # tool, arguments, what the one-line error must say
    ("search", {"query": ""}, "query must not be empty"),
    ("search", {"query": "\u200b \u200d"}, "query is empty once zero-width"),
    ("search", {"query": "paris", "k": 9}, "k must be at most 8 (got 9)"),
    ("search", {"query": "paris", "k": "many"}, "k: must be a valid integer (got 'many')"),
    ("search", {"query": 3}, "query: must be a valid string (got 3)"),
    ("ask", {"question": "who?", "full": "yes"}, "full: must be a valid boolean (got 'yes')"),
    ("ask", {"question": "who?", "profile": "papr"}, "profile must be one of 'paper', "),
    ("rerank", {"query": "q", "documents": ["a"], "top_n": 0}, "top_n must be at least 1 (got 0)"),
    ("ask", {"question": "x" * 201}, "question has 201 characters; the limit is 200"),
    ("ask", {"question": "  "}, "question must not be empty"),
    ("ask", {"question": "who?", "method": "nope"}, "method must be one of 'vanilla', 'rankrag', "),
    ("ask", {"question": "who?", "settings": {"max_answer_tokens": "many"}}, "settings.max_answer_tokens: "),
    ("ask", {"question": "who?", "settings": {"max_answer_tokens": 5000}},
     "settings.max_answer_tokens must be between 0 and 512 (got 5000)"),
    ("ask", {"question": "who?", "settings": {"window": 5}}, "settings.window: method 'rankrag' has no setting"),
    ("ask", {"question": "who?", "settings": {"n": 9}}, "settings.n must be between 1 and 8 (got 9)"),
    ("ask", {"question": "and its size?", "history": [{"role": "user", "text": "Which planet is largest?"},
                                                      {"role": "assistant", "text": "Jupiter."}]},
     "a dialogue history needs the conversational task"),
    ("ask", {"question": "and its size?", "method": "mainrag",
             "history": [{"role": "user", "text": "Which planet is largest?"}, {"role": "assistant", "text": "Jupiter."}]},
     "which method 'mainrag' does not have: ask without the history, or with method vanilla or rankrag or no-retrieval and settings.task"),
    ("ask", {"question": "and?", "history": [{"role": "user", "text": "x" * 201}],
             "settings": {"task": "conversational"}}, "history[0].text has 201 characters; the limit is 200"),
    ("ask", {"question": "who?", "settings": {"n": 4, "k": 5}}, "settings.k: setting 'k' (5) cannot exceed setting 'n' (4)"),
    ("rerank", {"query": "q", "documents": ["a"], "method": "zzz"}, "method must be one of 'pointwise', 'graded'"),
    ("rerank", {"query": "q", "documents": []}, "documents must have at least 1 item (got 0)"),
    ("rerank", {"query": "q", "documents": ["a"] * 5}, "documents must have at most 4 items (got 5)"),
    ("rerank", {"query": "q", "documents": ["a", {"text": "b" * 301}]},
     "documents[1].text has 301 characters; the limit is 300"),
    ("rerank", {"query": "q", "documents": ["a", ""]}, "documents[1] must not be empty"),
    ("rerank", {"query": "q", "documents": ["a"], "options": {"window": 3}},
     "options.window: rerank method 'pointwise' has no option 'window'"),
    ("rerank", {"query": "q", "documents": ["a"], "method": "listwise", "options": {"window": 1}},
     "options.window: setting 'window' must be at least 2 (got 1)"),
    # issue 40 item 12: arguments a tool does not take are refused, naming the ones it takes
    ("search", {"query": "paris", "top_k": 3}, "top_k is not an argument of this tool (its arguments: query, k)"),
    ("rerank", {"query": "q", "documents": ["a"], "top_k": 1, "model": "x"},
     "model, top_k are not arguments of this tool (its arguments: query, documents, method, top_n, options)"),
    # a NaN reaches the server as null (JSON has no NaN): one line naming the argument
    ("ask", {"question": "who?", "settings": {"n": float("nan")}}, "settings.n is null (a NaN or infinite number"),
    ("search", {"query": "paris", "k": float("nan")}, "k is null (a NaN or infinite number is sent as null)"),
    ("rerank", {"query": "q", "documents": ["a"], "method": "listwise", "options": {"window": float("inf")}},
     "options.window is null (a NaN or infinite number"),
]


@pytest.mark.parametrize(("tool", "arguments", "says"), BAD, ids=[f"{t}-{says[:30]}" for t, _, says in BAD])
def test_a_bad_argument_is_a_tool_error_naming_it(client, tool, arguments, says):
    message = client.error(tool, arguments)
    assert message.startswith(f"Error executing tool {tool}: ")
    assert says in message
    assert "Traceback" not in message and "\n" not in message and "pydantic.dev" not in message  # one line


def test_stdout_held_only_protocol_messages_and_stderr_no_traceback(client):
    assert client.faults == []
    log = client.stderr.read_text()
    assert f"winnow mcp: rankrag with {MODEL} over" in log  # the note went to stderr, not to the client
    assert "Traceback" not in log


def test_stdout_is_stderr_while_the_models_load(tmp_path):
    """What native code writes to fd 1 inside ``stdout_to_stderr`` lands on stderr; fd 1 is restored after."""
    code = textwrap.dedent("""
        import os
        from winnow.service.mcp_server import stdout_to_stderr
        with stdout_to_stderr():
            os.write(1, b"native log line\\n")
            print("python print")
        print("protocol")
    """)
    env = dict(os.environ, PYTHONPATH=str(SRC))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "protocol\n"
    assert "native log line" in done.stderr and "python print" in done.stderr


def test_the_mcp_extra_alone_needs_no_fastapi():
    """`winnow-rag[mcp]` without `winnow-rag[serve]`: the engine and the MCP server import, the HTTP app names
    its extra. FastAPI is hidden from the import system (a None entry in sys.modules is "not installed")."""
    code = textwrap.dedent("""
        import sys
        sys.modules["fastapi"] = None
        import winnow.service.mcp_server
        from winnow.extras import MissingExtra
        try:
            import winnow.service.app
        except MissingExtra as error:
            print(error.extra)
    """)
    env = dict(os.environ, PYTHONPATH=str(SRC))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "serve\n"
