"""``--tokenizer``: an OpenAI-compatible server's tokens counted here, not by a /tokenize per count.

Against the real SmolLM2 llama.cpp server on loopback (the in-process backend serves llama.cpp's
HTTP routes): the GGUF's own tokenizer, loaded with transformers, must count exactly what the
server's /tokenize and chat template count; another model's tokenizer is refused naming both counts;
a server with no /tokenize gets the local counts, marked as unchecked.
"""

from __future__ import annotations

import importlib.util

import pytest

from winnow.errors import ModelError, WinnowError
from winnow.llm import load_llm
from winnow.llm.hf_tokens import PROBE_PROMPT, TokenizerIds, load_tokenizer
from winnow.llm.openai_http import OpenAICompatibleBackend
from winnow.prompts import listwise_prompt
from winnow.records import Passage

pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                reason="needs the [tokenizer] extra")

TEXTS = ["Paris is the capital of France.", "  two  spaces and\ttabs\n\nnew paragraphs ", "naïve café 1,234.5",
         "<|im_start|> is text inside a passage", "東京 and Ωμέγα", ""]


@pytest.fixture(scope="module")
def smollm2_tokenizer(tmp_path_factory):
    # Module fixtures are set up before conftest's isolated_cache_dir: the same cache, set here.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WINNOW_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "winnow-cache"))
        return load_tokenizer("smollm2-135m")


@pytest.mark.llm
def test_the_ggufs_tokenizer_counts_what_the_server_counts(llama_backend, smollm2_tokenizer):
    ids, name = smollm2_tokenizer
    assert isinstance(ids, TokenizerIds) and "SmolLM2" in name
    server = llama_backend.tokens.ids
    for text in TEXTS:
        assert ids.encode(text) == server.encode(text), text
    passages = [Passage(str(i), text, title=f"T{i}") for i, text in enumerate(TEXTS)]
    for prompt in (listwise_prompt("rrr.listwise").messages("who?", passages),
                   [{"role": "user", "content": "Say yes."}, {"role": "assistant", "content": "Yes"}],
                   "System: plain framing\nUser: hi\nAssistant:"):
        assert ids.prompt_length(prompt) == server.prompt_length(prompt), prompt


@pytest.mark.llm
def test_the_openai_backend_counts_here_after_checking_the_server(llama_backend, tmp_path):
    url = f"{llama_backend._server.listening_address}/v1"
    llm = load_llm("smollm2-135m", backend="openai", base_url=url, cache=tmp_path / "calls.sqlite",
                   tokenizer="smollm2-135m")
    try:
        assert llm.token_counting.startswith("exact: --tokenizer")
        assert "counted here (agrees with llama.cpp server's /tokenize" in llm.token_counting
        assert isinstance(llm.backend.tokens.ids, TokenizerIds)  # no HTTP behind the counts
        prompt = [{"role": "user", "content": TEXTS[0]}]
        assert llm.count_prompt_tokens(prompt) == llama_backend.tokens.count_prompt(prompt)
        [answer] = llm.backend.generate([prompt], max_tokens=4)
        assert answer.prompt_tokens == llm.count_prompt_tokens(prompt)  # the server's own usage agrees
    finally:
        llm.close()


def test_another_models_tokenizer_is_refused_naming_both_counts():
    # The fault server's /tokenize counts one token per UTF-8 byte: not SmolLM2's tokenizer.
    from fault_server import FaultServer

    server = FaultServer()
    backend = OpenAICompatibleBackend("smollm2-135m", base_url=server.url, tokenizer="smollm2-135m")
    try:
        with pytest.raises(ModelError, match=r"--tokenizer smollm2-135m counts \d+ tokens in a passage where the "
                                             r"server's /tokenize at .* counts \d+: it is not the served model's"):
            backend.tokens.count("x")
    finally:
        backend.close()
        server.stop()


def test_a_server_without_a_tokenizer_gets_the_local_counts_unchecked(smollm2_tokenizer):
    from fault_server import FaultServer

    server = FaultServer(dead=True)  # /tokenize answers 500 (and so does everything else)
    backend = OpenAICompatibleBackend("smollm2-135m", base_url=server.url, tokenizer="smollm2-135m")
    try:
        tokens = backend.tokens
        assert tokens.exact and "not checked: the server has no tokenizer" in tokens.description
        assert tokens.count(TEXTS[0]) == len(smollm2_tokenizer[0].encode(TEXTS[0]))
    finally:
        backend.close()
        server.stop()


def test_a_ggufs_tokenizer_is_converted_once_and_kept(smollm2_tokenizer):
    from winnow.paths import cache_root

    from winnow.models.registry import REGISTRY

    [kept] = (cache_root() / "tokenizers").glob(f"smollm2-135m-{REGISTRY['smollm2-135m'].sha256[:16]}")
    assert (kept / "tokenizer.json").is_file()
    again, _ = load_tokenizer.__wrapped__("smollm2-135m")  # past the per-process memo: read from the cache
    assert again.prompt_length(PROBE_PROMPT) == smollm2_tokenizer[0].prompt_length(PROBE_PROMPT)


def test_a_hub_tokenizer_offline_is_one_line(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError, match="the tokenizer someone/absent-model is not in the Hugging Face cache"):
        load_tokenizer.__wrapped__("someone/absent-model")


def test_bad_tokenizers_are_refused_with_what_to_give(tmp_path):
    with pytest.raises(ModelError, match="holds no tokenizer.json"):
        load_tokenizer(str(tmp_path))
    with pytest.raises(ModelError, match="no such folder or file"):
        load_tokenizer(str(tmp_path / "missing"))
    with pytest.raises(WinnowError, match="tokenizer applies to the openai backend"):
        load_llm("smollm2-135m", backend="llama.cpp", tokenizer="smollm2-135m")
