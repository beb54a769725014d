"""The two real backends: llama.cpp in-process, and an OpenAI-compatible server on loopback.

The HTTP server is llama.cpp's own (xllamacpp serves the OpenAI routes on 127.0.0.1), so both
backends run the same model and must agree.
"""

import math

import pytest

from winnow.errors import BackendError
from winnow.llm.openai_http import OpenAICompatibleBackend

pytestmark = pytest.mark.llm

CAPITAL = [{"role": "system", "content": "Answer with one word."},
           {"role": "user", "content": "Is Paris the capital of France? Answer True or False."}]
COLOUR = [{"role": "user", "content": "What colour is the sky on a clear day? Answer in one word."}]


def test_generate_is_deterministic_and_counts_tokens(llama_backend):
    first, second = llama_backend.generate([COLOUR, COLOUR], max_tokens=8)
    assert first.text and first.text == second.text
    assert first.prompt_tokens > 5 and 0 < first.completion_tokens <= 8


def test_choice_logprobs_form_a_distribution(llama_backend):
    [scores] = llama_backend.choice_logprobs([CAPITAL], ["True", "False"])
    total = sum(math.exp(v) for v in scores.logprobs.values())
    assert total == pytest.approx(1.0)
    assert scores.missing == ()
    assert scores.prompt_tokens > 10


@pytest.fixture(scope="module")
def http_backend(llama_backend):
    backend = OpenAICompatibleBackend("smollm2", base_url=llama_backend.http_address + "/v1", max_inflight=2)
    yield backend
    backend.close()


def test_http_backend_agrees_with_in_process(llama_backend, http_backend):
    [local] = llama_backend.choice_logprobs([CAPITAL], ["True", "False"])
    [remote] = http_backend.choice_logprobs([CAPITAL], ["True", "False"])
    # OpenAI's API returns only 20 alternatives, but True/False are among them here.
    assert remote.logprobs["True"] == pytest.approx(local.logprobs["True"], abs=1e-3)
    [text_local] = llama_backend.generate([COLOUR], max_tokens=8)
    texts = http_backend.generate([COLOUR, CAPITAL, COLOUR], max_tokens=8)
    assert texts[0].text == text_local.text == texts[2].text


def test_http_backend_unreachable_server_is_a_clear_error():
    backend = OpenAICompatibleBackend("m", base_url="http://127.0.0.1:9/v1", timeout=5)
    with pytest.raises(BackendError, match=r"cannot reach http://127.0.0.1:9/v1/chat/completions"):
        backend.generate([COLOUR], max_tokens=4)


def test_http_backend_without_address_names_the_option(monkeypatch):
    for name in ("WINNOW_OPENAI_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(BackendError, match="--base-url"):
        OpenAICompatibleBackend("m")


def test_http_backend_server_error_is_reported(llama_backend):
    backend = OpenAICompatibleBackend("m", base_url=llama_backend.http_address + "/nope")
    with pytest.raises(BackendError, match="answered 404"):
        backend.generate([COLOUR], max_tokens=4)


PREFILLED = [*CAPITAL, {"role": "assistant", "content": "The answer is"}]


def test_prefilled_turn_is_continued_over_http(llama_backend, http_backend):
    # The continuation fields vLLM needs are accepted by llama.cpp's server, which continues the turn
    # the same way in-process: the scores agree with and without them.
    [local] = llama_backend.choice_logprobs([PREFILLED], ["True", "False"])
    [remote] = http_backend.choice_logprobs([PREFILLED], ["True", "False"])
    assert remote.logprobs["True"] == pytest.approx(local.logprobs["True"], abs=1e-3)
    [fresh] = llama_backend.choice_logprobs([CAPITAL], ["True", "False"])
    assert local.logprobs["True"] != pytest.approx(fresh.logprobs["True"], abs=1e-3)  # the prefill mattered


def test_continuation_fields_only_for_a_started_answer(monkeypatch):
    from winnow.llm.openai_http import continuation_fields

    assert continuation_fields(CAPITAL) == {}
    assert continuation_fields(PREFILLED) == {"continue_final_message": True, "add_generation_prompt": False}
    monkeypatch.setenv("WINNOW_OPENAI_CONTINUE", "off")
    assert continuation_fields(PREFILLED) == {}
