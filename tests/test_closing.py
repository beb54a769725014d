"""Sessions closed on exit, and ``with`` blocks (issue 40, item 13), against a real loopback server.

aiohttp prints "Unclosed client session" when an OpenAI-compatible backend's sessions are still open
as the interpreter ends: the Python API, the LangChain and the LlamaIndex adapters did, unless the
user called ``close()``. The dispatcher that owns the sessions now closes them when it is collected or
at exit, and every object that loads a model is a context manager.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fault_server import FaultServer

from winnow.llm import LLM, load_llm
from winnow.records import StageTrace

TESTS = Path(__file__).parent

#: Each front door used once and left open, then the interpreter ends (the process boundary is the test).
LEFT_OPEN = """
import sys
sys.path.insert(0, {tests!r})
from fault_server import FaultServer
import winnow
from winnow.records import StageTrace
from winnow.integrations.langchain import WinnowCompressor
from winnow.integrations.llamaindex import WinnowPostprocessor
from langchain_core.documents import Document
from llama_index.core.schema import NodeWithScore, TextNode

server = FaultServer()
options = dict(model="m", backend="openai", base_url=server.url)  # the call cache under WINNOW_CACHE_DIR
llm = winnow.load_llm(**options)
llm.generate([[{{"role": "user", "content": "hi"}}]], stage=StageTrace("a", "t"), max_tokens=4)
llm.count_tokens("a start-up question")
texts = ["Paris is the capital of France.", "Berlin is in Germany."]
WinnowCompressor(stage="pointwise", **options).compress_documents([Document(page_content=t) for t in texts], "Paris?")
WinnowPostprocessor(stage="pointwise", **options).postprocess_nodes(
    [NodeWithScore(node=TextNode(text=t)) for t in texts], query_str="Paris?")
print("done")
"""


@pytest.fixture
def server():
    running = FaultServer()
    yield running
    running.stop()


@pytest.mark.subprocess
def test_nothing_left_open_at_exit_from_the_python_api_and_the_adapters(tmp_path):
    pytest.importorskip("langchain_core")
    pytest.importorskip("llama_index.core")
    env = {**os.environ, "WINNOW_CACHE_DIR": str(tmp_path), "PYTHONWARNINGS": "default"}
    result = subprocess.run([sys.executable, "-c", LEFT_OPEN.format(tests=str(TESTS))], capture_output=True,
                            text=True, timeout=300, env=env)
    assert result.returncode == 0 and result.stdout.strip() == "done", result.stderr
    assert "Unclosed" not in result.stderr, result.stderr


def _stopped(llm: LLM) -> bool:
    """Whether the LLM's dispatcher has no loop running (its sessions closed with it)."""
    return llm.backend.dispatcher._io._loop is None  # type: ignore[attr-defined]


def test_an_llm_in_a_with_block_is_closed_at_its_end(server):
    with load_llm("m", backend="openai", base_url=server.url, cache=False) as llm:
        llm.generate([[{"role": "user", "content": "hi"}]], stage=StageTrace("a", "t"), max_tokens=4)
        assert not _stopped(llm)
    assert _stopped(llm)


def test_a_winnower_in_a_with_block_closes_the_model_it_loaded(server):
    from winnow.integrations.core import Winnower

    with Winnower("pointwise", model="m", backend="openai", base_url=server.url, cache=False) as winnower:
        result = winnower.run("Paris?", ["Paris is the capital of France.", "Berlin is in Germany."])
        loaded = winnower.llm
        assert result.kept and loaded is not None and not _stopped(loaded)
    assert _stopped(loaded)


def test_the_adapters_retrievers_are_context_managers(server, index):
    pytest.importorskip("langchain_core")
    pytest.importorskip("llama_index.core")
    from winnow.integrations.langchain import WinnowRetriever as LangChainRetriever
    from winnow.integrations.llamaindex import WinnowRetriever as LlamaIndexRetriever

    options = dict(index=index.path, model="m", backend="openai", base_url=server.url, cache=False, n=4, k=2)
    with LangChainRetriever(method="rankrag", **options) as retriever:
        assert retriever.invoke("Who painted the Mona Lisa?")
        runner = retriever._runner
    assert not runner._owned  # the models it loaded are closed and let go
    with LlamaIndexRetriever("rankrag", **options) as retriever:
        assert retriever.retrieve("Who painted the Mona Lisa?")
        runner = retriever._runner
    assert not runner._owned
