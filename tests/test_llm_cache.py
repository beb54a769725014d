"""The LLM call cache and the usage meter, with the real model."""

import subprocess
import sys

import pytest

from winnow.llm import LLM, CallCache
from winnow.llm.cache import call_key
from winnow.records import StageTrace

pytestmark = pytest.mark.llm

PROMPT = [{"role": "user", "content": "Name a primary colour."}]
JUDGE = [{"role": "user", "content": "Is water wet? Answer Yes or No."}]


def test_second_call_is_a_cache_hit_with_the_same_answer(llm):
    first, second = StageTrace("a", "t"), StageTrace("b", "t")
    [g1] = llm.generate([PROMPT], stage=first, max_tokens=6)
    [g2] = llm.generate([PROMPT], stage=second, max_tokens=6)
    assert g1.text == g2.text
    assert (first.usage.calls, first.usage.cache_hits) == (1, 0)
    assert (second.usage.calls, second.usage.cache_hits) == (0, 1)
    assert first.usage.prompt_tokens > 0 and second.usage.prompt_tokens == 0
    assert second.llm_calls[0].cached and second.llm_calls[0].output == g1.text


def test_choice_scores_are_cached_too(llm):
    first, second = StageTrace("a", "t"), StageTrace("b", "t")
    [s1] = llm.choice_scores([JUDGE], ["Yes", "No"], stage=first)
    [s2] = llm.choice_scores([JUDGE], ["Yes", "No"], stage=second)
    assert s1.logprobs == s2.logprobs
    assert second.usage.cache_hits == 1 and second.usage.calls == 0


def test_different_parameters_do_not_share_an_entry(llm):
    stage = StageTrace("a", "t")
    llm.generate([PROMPT], stage=stage, max_tokens=6)
    llm.generate([PROMPT], stage=stage, max_tokens=3)
    assert stage.usage.calls == 2


def test_no_cache_always_calls_the_model(llama_backend):
    llm = LLM(llama_backend, cache=None)
    stage = StageTrace("a", "t")
    llm.generate([PROMPT, PROMPT], stage=stage, max_tokens=4)
    assert (stage.usage.calls, stage.usage.cache_hits) == (2, 0)


def test_sampled_generations_are_not_cached(llm):
    stage = StageTrace("a", "t")
    llm.generate([PROMPT], stage=stage, max_tokens=4, temperature=0.7)
    llm.generate([PROMPT], stage=stage, max_tokens=4, temperature=0.7)
    assert stage.usage.cache_hits == 0


def test_mixed_hits_and_misses_keep_prompt_order(llm):
    stage = StageTrace("a", "t")
    other = [{"role": "user", "content": "Name a planet."}]
    [a] = llm.generate([PROMPT], stage=stage, max_tokens=6)
    x, y, z = llm.generate([other, PROMPT, other], stage=StageTrace("b", "t"), max_tokens=6)
    assert y.text == a.text and x.text == z.text


def test_key_depends_on_model_identity():
    params = {"max_tokens": 1}
    a = call_key({"backend": "llama.cpp", "sha256": "a"}, "generate", PROMPT, params)
    b = call_key({"backend": "llama.cpp", "sha256": "b"}, "generate", PROMPT, params)
    assert a != b


WRITER = """
import sys
from winnow.llm.cache import CallCache
cache = CallCache(sys.argv[1])
for i in range(200):
    cache.put(f"{sys.argv[2]}-{i}", "generate", {"text": str(i)})
"""


def test_two_processes_can_write_the_same_cache(tmp_path):
    path = tmp_path / "shared.sqlite"
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), name]) for name in ("p", "q")]
    assert [w.wait(timeout=60) for w in writers] == [0, 0]
    cache = CallCache(path)
    assert len(cache) == 400
    assert cache.get("q-199") == {"text": "199"}


def test_a_corrupt_cache_file_is_a_clear_error(tmp_path):
    from winnow.errors import WinnowError

    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(WinnowError, match="--no-cache"):
        CallCache(bad)
