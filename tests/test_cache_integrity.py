"""What the call cache does with a changed or damaged file, and what a run does with answers whose top
tokens hold no choice (issue 40, items 1, 6 and 9): against real SQLite files and a real loopback
server (tests/fault_server.py), no model.

- An entry whose stored answer was edited (``George`` → ``Martha``, same length) fails its checksum:
  it is dropped, asked again and counted, never served.
- A file written before entries had checksums: its entries are unverified, asked again once.
- A file with bytes flipped past its first page: ``winnow cache info`` says so in one line and how to
  recover; ``ask`` and ``eval`` go on without the cache, saying so once; ``winnow cache clear`` recovers.
- A server whose scoring answers hold neither "True" nor "False": each passage scores 0.5, the calls
  are counted and the run warns.
"""

from __future__ import annotations

import json
import sqlite3

import pytest
from fault_server import FaultServer
from typer.testing import CliRunner

from winnow.cli import app
from winnow.errors import WinnowError
from winnow.llm import LLM, CallCache
from winnow.llm.cache import CORRUPT, UNVERIFIED, CacheDamaged, entry_checksum
from winnow.llm.openai_http import OpenAICompatibleBackend
from winnow.records import StageTrace

ANSWER = {"text": "George Washington was the first president", "prompt_tokens": 9, "completion_tokens": 6,
          "seconds": 0.25, "finish_reason": "stop", "retries": 0}
PROMPT = [{"role": "user", "content": "Who was the first president of the United States?"}]


@pytest.fixture
def server():
    running = FaultServer()
    yield running
    running.stop()


def _edit(path, old: bytes, new: bytes) -> None:
    """Replace ``old`` by ``new`` (same length) in the file's bytes, as a hand edit or a bad disk would."""
    data = path.read_bytes()
    assert len(old) == len(new) and data.count(old) == 1, "the text to change must be in the file once"
    path.write_bytes(data.replace(old, new))


def _flip(path, count: int = 200, tree: str = "llm_calls_created") -> None:
    """Flip ``count`` bytes at the start of the root page of ``tree`` (the index that counts and dates
    the entries), past the first page: the file's header and schema stay readable, so the damage shows
    at the first query that reads the tree, not at opening."""
    with sqlite3.connect(path) as db:
        [(root,)] = db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (tree,))
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big") or 65536
    start = (root - 1) * page
    assert root > 1 and len(data) >= start + count
    for i in range(start, start + count):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def _filled(path, entries: int = 1) -> None:
    cache = CallCache(path)
    for i in range(entries):
        cache.put(f"key-{i}", "generate", {**ANSWER, "text": f"{ANSWER['text']} ({i})" if i else ANSWER["text"]})
    cache.close()  # the last connection folds the write-ahead log into the file


# --- item 1: a checksum per entry -----------------------------------------------------------------------

def test_an_edited_answer_fails_its_checksum_and_is_never_served(tmp_path):
    path = tmp_path / "calls.sqlite"
    _filled(path)
    _edit(path, b"George", b"Martha")
    cache = CallCache(path)
    assert cache.lookup("key-0") == (None, CORRUPT)
    assert cache.lookup("key-0") == (None, "") and len(cache) == 0  # dropped, not kept to fail again
    cache.put("key-0", "generate", ANSWER)
    assert cache.get("key-0") == ANSWER


def test_an_answer_moved_under_another_key_fails_its_checksum(tmp_path):
    path = tmp_path / "calls.sqlite"
    cache = CallCache(path)
    cache.put("a" * 64, "generate", ANSWER)
    cache._db.execute("UPDATE llm_calls SET key = ? WHERE key = ?", ("b" * 64, "a" * 64))
    assert cache.lookup("b" * 64) == (None, CORRUPT)


def test_a_cache_file_from_before_checksums_gets_the_column_and_its_entries_are_asked_again(tmp_path):
    path = tmp_path / "old.sqlite"
    old = sqlite3.connect(path)
    old.executescript("CREATE TABLE llm_calls (key TEXT PRIMARY KEY, kind TEXT NOT NULL, response TEXT NOT NULL, "
                      "created REAL NOT NULL); "
                      "CREATE TABLE cache_meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);")
    old.execute("INSERT INTO llm_calls VALUES ('k', 'generate', ?, 1.0)", (json.dumps(ANSWER),))
    old.commit()
    old.close()
    cache = CallCache(path)
    assert cache.lookup("k") == (None, UNVERIFIED)
    cache.put("k", "generate", ANSWER)
    assert cache.lookup("k") == (ANSWER, "")
    [(stored,)] = cache._db.execute("SELECT checksum FROM llm_calls WHERE key = 'k'")
    assert stored == entry_checksum("k", "generate", json.dumps(ANSWER, ensure_ascii=False).encode())


def test_a_run_asks_an_edited_answer_again_counts_it_and_says_so_once(server, tmp_path, capsys):
    path = tmp_path / "calls.sqlite"
    first = LLM(OpenAICompatibleBackend("m", base_url=server.url), CallCache(path))
    [fresh] = first.generate([PROMPT], stage=StageTrace("read", "reader"), max_tokens=8)
    first.close()
    assert fresh.text.startswith("answer ")
    _edit(path, fresh.text.encode(), b"Martha" + fresh.text.encode()[6:])  # "answer 1a2b3c" -> "Martha 1a2b3c"

    llm = LLM(OpenAICompatibleBackend("m", base_url=server.url), CallCache(path))
    again, third = StageTrace("read", "reader"), StageTrace("read", "reader")
    [answer] = llm.generate([PROMPT], stage=again, max_tokens=8)
    [cached] = llm.generate([PROMPT], stage=third, max_tokens=8)
    llm.close()
    assert answer.text == cached.text == fresh.text and "Martha" not in answer.text
    assert (again.usage.calls, again.usage.cache_hits, again.usage.cache_rejected) == (1, 0, 1)
    assert again.llm_calls[0].to_dict()["cache_rejected"] is True
    assert (third.usage.calls, third.usage.cache_hits, third.usage.cache_rejected) == (0, 1, 0)
    assert "cache_rejected" not in third.llm_calls[0].to_dict()  # a call's record keeps its keys when all is well
    assert llm.rejected_cache_entries == {CORRUPT: 1}
    said = capsys.readouterr().err
    assert said.count("fails its checksum") == 1 and "never served" in said


def test_ask_serves_no_edited_answer(server, index, tmp_path, monkeypatch):
    """The issue's case end to end: a vanilla `winnow ask`, the cache file edited, the same command again."""
    monkeypatch.setenv("WINNOW_CACHE_DIR", str(tmp_path / "cache"))
    command = ["ask", "Who painted the Mona Lisa?", "--index", str(index.path), "--method", "vanilla",
               "--backend", "openai", "--model", "m", "--base-url", server.url, "--json"]
    first = CliRunner().invoke(app, command)
    assert first.exit_code == 0, first.output
    answer = json.loads(first.stdout)["answer"]
    _edit(tmp_path / "cache" / "llm-calls.sqlite", answer.encode(), b"Martha" + answer.encode()[6:])
    calls_before = server.completions
    second = CliRunner().invoke(app, command)
    assert second.exit_code == 0, second.output
    assert json.loads(second.stdout)["answer"] == answer and server.completions == calls_before + 1
    assert "fails its checksum" in second.stderr


# --- item 9: a damaged database -------------------------------------------------------------------------

def test_cache_info_on_a_damaged_file_is_one_line_saying_how_to_recover(tmp_path):
    path = tmp_path / "calls.sqlite"
    _filled(path, entries=400)
    _flip(path)
    result = CliRunner().invoke(app, ["cache", "info", "--path", str(path)])
    # A WinnowError: the command line prints it as one line, status 2, no traceback (winnow.cli.run).
    assert result.exit_code != 0 and isinstance(result.exception, WinnowError), result.output
    said = str(result.exception)
    assert len(said.splitlines()) == 1 and said.startswith(f"the LLM call cache {path} is damaged (database disk "
                                                           "image is malformed)")
    assert "run `winnow cache clear`" in said
    cleared = CliRunner().invoke(app, ["cache", "clear", "--path", str(path)])
    assert cleared.exit_code == 0, cleared.output
    assert "damaged" in cleared.stdout
    fresh = CliRunner().invoke(app, ["cache", "info", "--path", str(path), "--json"])
    assert fresh.exit_code == 0 and json.loads(fresh.stdout)["entries"] == 0


def test_a_run_over_a_damaged_cache_goes_on_without_it_and_says_so_once(server, tmp_path, capsys):
    path = tmp_path / "calls.sqlite"
    _filled(path, entries=400)
    _flip(path)
    cache = CallCache(path)  # the header and schema are readable: the damage shows at the first query
    with pytest.raises(CacheDamaged, match="winnow cache clear"):
        len(cache)
    llm = LLM(OpenAICompatibleBackend("m", base_url=server.url), CallCache(path))
    prompts = [[{"role": "user", "content": f"question {i}"}] for i in range(6)]
    for _ in range(2):
        answers = llm.generate(prompts, stage=StageTrace("read", "reader"), max_tokens=8)
        assert all(a.text.startswith("answer ") for a in answers)
    llm.close()
    said = capsys.readouterr().err
    assert said.count("is damaged") == 1 and "going on without the cache" in said and "winnow cache clear" in said


def test_eval_over_a_damaged_cache_finishes_and_says_so_once(server, index, tmp_path, monkeypatch):
    monkeypatch.setenv("WINNOW_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "cache" / "llm-calls.sqlite"
    path.parent.mkdir()
    _filled(path, entries=400)
    _flip(path)
    queries = tmp_path / "q.jsonl"
    queries.write_text("".join(json.dumps({"id": f"q{i}", "question": q, "golden_answers": ["x"]}) + "\n"
                               for i, q in enumerate(["Who painted the Mona Lisa?", "What is the capital of France?"])))
    result = CliRunner().invoke(app, ["eval", "--index", str(index.path), "--queries", str(queries), "--out",
                                      str(tmp_path / "run"), "--method", "rankrag", "--n", "4", "--k", "2",
                                      "--backend", "openai", "--model", "m", "--base-url", server.url])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and result.stderr.count("is damaged") == 1
    assert len((tmp_path / "run" / "answers.jsonl").read_text().splitlines()) == 2


# --- item 6: no choice among the top tokens -------------------------------------------------------------

def test_an_answer_without_either_choice_scores_one_half_and_is_counted(tmp_path, capsys):
    server = FaultServer(missing_choices=True)
    try:
        llm = LLM(OpenAICompatibleBackend("m", base_url=server.url), None)
        traces = [StageTrace("rerank", "pointwise-true") for _ in range(6)]
        prompts = [[{"role": "user", "content": f"Is passage {i} relevant? Answer True or False."}] for i in range(6)]
        scores = llm.choice_scores(prompts, ["True", "False"], stage=traces)
        llm.close()
    finally:
        server.stop()
    assert all(s.probability("True") == pytest.approx(0.5) and s.missing == ("True", "False") for s in scores)
    call = traces[0].llm_calls[0].to_dict()
    assert call["choices_not_in_top"] is True and call["output"] == {"True": 0.5, "False": 0.5}
    assert sum(t.usage.choices_not_in_top for t in traces) == 6 == llm.choices_not_in_top
    said = capsys.readouterr().err
    assert said.count('had none of "True"/"False"') == 1 and "P(\"True\") 0.5" in said


def test_eval_against_a_server_without_the_choices_warns_and_counts_them(index, tmp_path):
    server = FaultServer(missing_choices=True)
    queries = tmp_path / "q.jsonl"
    queries.write_text(json.dumps({"id": "q1", "question": "Who painted the Mona Lisa?", "golden_answers": ["x"]})
                       + "\n" + json.dumps({"id": "q2", "question": "Capital of France?", "golden_answers": ["x"]})
                       + "\n")
    try:
        result = CliRunner().invoke(app, ["eval", "--index", str(index.path), "--queries", str(queries), "--out",
                                          str(tmp_path / "run"), "--method", "rankrag", "--n", "4", "--k", "2",
                                          "--backend", "openai", "--model", "m", "--base-url", server.url,
                                          "--no-cache"])
    finally:
        server.stop()
    assert result.exit_code == 0, result.output
    assert 'had none of "True"/"False"' in " ".join(result.stderr.split())
    lines = [json.loads(line) for line in (tmp_path / "run" / "answers.jsonl").read_text().splitlines()]
    # Every scoring call of the run (one a retrieved passage) is counted, in each line and in the summary.
    counts = [line["usage"]["choices_not_in_top"] for line in lines]
    assert counts == [line["stages"][1]["usage"]["calls"] for line in lines] and min(counts) >= 1
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["cost"]["choices_not_in_top"] == sum(counts)
