"""The LLM call cache's size limit and the ``winnow cache`` commands (a real SQLite file, no model)."""

import json

import pytest
from typer.testing import CliRunner

from winnow.cli import app
from winnow.errors import WinnowError
from winnow.llm.cache import CallCache, parse_size

ANSWER = {"text": "x" * 1000, "prompt_tokens": 5, "completion_tokens": 1, "seconds": 0.1}


def fill(cache: CallCache, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        cache.put(f"key-{i:06d}", "generate", ANSWER)


def test_past_its_limit_the_cache_evicts_its_oldest_entries_and_counts_them(tmp_path):
    cache = CallCache(tmp_path / "calls.sqlite", max_bytes=300_000)
    fill(cache, 1000)  # about 1 MB of answers
    assert cache.size_bytes() <= 300_000
    kept = len(cache)
    assert 100 < kept < 300 and cache.evicted() == 1000 - kept
    assert cache.get("key-000000") is None and cache.get("key-000999") == ANSWER  # oldest went, newest stayed
    cache.close()
    reopened = CallCache(tmp_path / "calls.sqlite", max_bytes=300_000)
    assert reopened.evicted() == 1000 - kept  # counted in the file, for `winnow cache info`
    reopened.close()


def test_the_limit_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("WINNOW_LLM_CACHE_MAX_SIZE", "2.5 MB")
    assert CallCache(tmp_path / "a.sqlite").max_bytes == 2_500_000
    monkeypatch.setenv("WINNOW_LLM_CACHE_MAX_SIZE", "lots")
    with pytest.raises(WinnowError, match="WINNOW_LLM_CACHE_MAX_SIZE 'lots' is not a size") as caught:
        CallCache(tmp_path / "b.sqlite")
    assert "500MB" in caught.value.hint


@pytest.mark.parametrize(("text", "size"), [("1GB", 10**9), ("200 MB", 2 * 10**8), ("2GiB", 2 * 2**30),
                                            ("1234", 1234), ("1.5k", 1500)])
def test_sizes_parse_with_and_without_units(text, size):
    assert parse_size(text) == size


def run(*args, env):
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "80", **env})
    return result


def test_winnow_cache_info_prune_and_clear(tmp_path):
    env = {"WINNOW_CACHE_DIR": str(tmp_path)}
    result = run("cache", "info", env=env)
    assert result.exit_code == 0 and "(not created yet)" in result.output
    cache = CallCache(tmp_path / "llm-calls.sqlite")
    fill(cache, 200)
    cache.close()

    result = run("cache", "info", env=env)
    assert result.exit_code == 0, result.output
    assert "200" in result.output and "of 1.0 GB allowed" in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80
    facts = json.loads(run("cache", "info", "--json", env=env).output)
    assert facts["entries"] == 200 and facts["evicted"] == 0 and facts["bytes"] > 200_000

    result = run("cache", "prune", "--max-size", "100kB", env=env)
    assert result.exit_code == 0, result.output
    facts = json.loads(run("cache", "info", "--json", env=env).output)
    assert facts["bytes"] <= 100_000 and facts["evicted"] == 200 - facts["entries"]
    assert f"pruned {200 - facts['entries']} entries, freed" in result.output

    result = run("cache", "clear", env=env)
    assert f"cleared {facts['entries']} entries, freed" in result.output
    assert json.loads(run("cache", "info", "--json", env=env).output)["entries"] == 0


def test_a_bad_max_size_is_one_clear_line(tmp_path):
    result = run("cache", "prune", "--max-size", "10zz", env={"WINNOW_CACHE_DIR": str(tmp_path)})
    assert result.exit_code != 0 and isinstance(result.exception, WinnowError)
    assert "--max-size '10zz' is not a size" in str(result.exception)
