"""The LLM call cache and the usage meter, with the real model."""

import subprocess
import sys
import time

import pytest

from winnow.llm import LLM, CallCache
from winnow.llm.cache import call_key
from winnow.records import StageTrace
from winnow.report import summary_line

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
    # What the hit cost when first asked is kept, so a cached rerun can still report its full price.
    assert (second.usage.cached_prompt_tokens, second.usage.cached_completion_tokens) == (
        first.usage.prompt_tokens, first.usage.completion_tokens)
    assert second.usage.cached_seconds == pytest.approx(first.usage.seconds) and first.usage.cached_seconds == 0
    line = summary_line(second.usage, 0.1)
    assert f"the cached calls first cost {first.usage.prompt_tokens} prompt" in line
    assert "first cost" not in summary_line(first.usage, 1.0)


def test_choice_scores_are_cached_too(llm):
    first, second = StageTrace("a", "t"), StageTrace("b", "t")
    [s1] = llm.choice_scores([JUDGE], ["Yes", "No"], stage=first)
    [s2] = llm.choice_scores([JUDGE], ["Yes", "No"], stage=second)
    assert s1.logprobs == s2.logprobs
    assert second.usage.cache_hits == 1 and second.usage.calls == 0


def test_a_cached_answer_todays_checks_refuse_is_asked_again(llm):
    """An entry written by an older version (a NaN log-probability, a missing field) is not served."""
    first = StageTrace("a", "t")
    [fresh] = llm.choice_scores([JUDGE], ["Yes", "No"], stage=first)
    [key] = _keys(llm)
    llm.cache.put(key, "choices", {"logprobs": {"Yes": float("nan"), "No": -0.1}, "prompt_tokens": 9,
                                   "seconds": 0.1, "missing": []})
    again = StageTrace("b", "t")
    [scores] = llm.choice_scores([JUDGE], ["Yes", "No"], stage=again)
    assert scores.logprobs == fresh.logprobs
    assert (again.usage.calls, again.usage.cache_hits, llm.stale_cache_entries) == (1, 0, 1)
    third = StageTrace("c", "t")
    llm.choice_scores([JUDGE], ["Yes", "No"], stage=third)  # the entry was overwritten with a good one
    assert (third.usage.cache_hits, llm.stale_cache_entries) == (1, 1)


def _keys(llm):
    return [row[0] for row in llm.cache._db.execute("SELECT key FROM llm_calls")]


def test_different_parameters_do_not_share_an_entry(llm):
    stage = StageTrace("a", "t")
    llm.generate([PROMPT], stage=stage, max_tokens=6)
    llm.generate([PROMPT], stage=stage, max_tokens=3)
    assert stage.usage.calls == 2


def test_no_cache_always_calls_the_model(llama_backend):
    llm = LLM(llama_backend, cache=None)
    stage = StageTrace("a", "t")
    llm.generate([PROMPT], stage=stage, max_tokens=4)
    llm.generate([PROMPT], stage=stage, max_tokens=4)
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
import sys, time
from winnow.llm.cache import CallCache
start = float(sys.argv[3])
while time.time() < start:  # every writer opens the fresh file at the same moment
    pass
cache = CallCache(sys.argv[1])
for i in range(100):
    cache.put(f"{sys.argv[2]}-{i}", "generate", {"text": str(i)})
"""


@pytest.mark.subprocess
@pytest.mark.parametrize("round_", range(3))
def test_processes_opening_a_fresh_cache_together_all_write_to_it(tmp_path, round_):
    # Opening switches a new file to WAL, which needs an exclusive lock that SQLite's busy timeout
    # does not wait for; before the set-up retried, a writer failed in 1 of these 3 rounds.
    path = tmp_path / "shared.sqlite"
    start = time.time() + 1.5  # after every interpreter has imported winnow
    names = ("p", "q", "r", "s")
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), name, str(start)],
                                stderr=subprocess.PIPE, text=True) for name in names]
    results = [(w.wait(timeout=60), w.stderr.read()) for w in writers]
    assert [code for code, _ in results] == [0] * len(names), [err for _, err in results if err]
    cache = CallCache(path)
    assert len(cache) == 100 * len(names)
    assert cache.get("s-99") == {"text": "99"}


def test_a_corrupt_cache_file_is_a_clear_error(tmp_path):
    from winnow.errors import WinnowError

    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(WinnowError, match="--no-cache"):
        CallCache(bad)
