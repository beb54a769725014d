"""RankGPT's window on a hosted API (no /tokenize): passages keep what a real tokenizer would let them keep.

RankGPT truncates each of a window's 20 passages until the prompt's tiktoken count fits 4,096 − 200
(about 150 words a passage for GPT-3.5). With no tokenizer to ask, Winnow estimates; the estimate
must not cut English passages to a fraction of that (at 3 bytes a token it kept about 60 words).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from winnow.cli import app
from winnow.corpus.wiki_vital import iter_wiki_vital_passages, wiki_vital_path

ROOT = Path(__file__).resolve().parent.parent
WORDS_A_PASSAGE = 300


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def hosted_api():
    """The load-test server: an OpenAI-compatible chat route with no /tokenize and no /v1/models."""
    port = free_port()
    process = subprocess.Popen([sys.executable, str(ROOT / "bench" / "loadtest_server.py"), "--port", str(port),
                                "--base-latency", "0.001", "--capacity", "8"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{base}/stats", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert process.poll() is None and time.monotonic() < deadline, "the load-test server did not start"
        time.sleep(0.1)
    yield base
    process.terminate()
    process.wait(timeout=15)


@pytest.fixture(scope="module")
def long_passages_index(tmp_path_factory):
    """20 passages of 300 words of real English (wiki-vital lead sections run together)."""
    folder = tmp_path_factory.mktemp("hosted")
    words: list[str] = []
    for passage, _ in iter_wiki_vital_passages(wiki_vital_path()):
        words += passage.text.split()
        if len(words) >= 20 * WORDS_A_PASSAGE:
            break
    lines = [json.dumps({"id": f"p{i}", "title": f"Article {i}",
                         "text": " ".join(words[i * WORDS_A_PASSAGE:(i + 1) * WORDS_A_PASSAGE])}) for i in range(20)]
    (folder / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(app, ["index", str(folder / "corpus.jsonl"), "--out", str(folder / "index")])
    assert result.exit_code == 0, result.output
    return folder / "index"


@pytest.mark.subprocess
def test_rankgpt_paper_profile_on_a_hosted_api_keeps_about_120_words_a_passage(hosted_api, long_passages_index,
                                                                                   tmp_path, monkeypatch):
    monkeypatch.setenv("WINNOW_CACHE_DIR", str(tmp_path / "cache"))
    result = CliRunner().invoke(app, ["ask", "Article", "--index", str(long_passages_index), "--method", "rankgpt",
                                      "--profile", "paper", "--n", "20", "--backend", "openai", "--base-url",
                                      f"{hosted_api}/v1", "--model", "gpt-3.5-turbo", "--context-size", "4096", "--no-cache",
                                      "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    listwise = [stage for stage in answer["trace"]["stages"] if stage["kind"] == "listwise"]
    assert listwise, [stage["kind"] for stage in answer["trace"]["stages"]]
    window = listwise[0]
    assert window["details"]["fitted"], "20 passages of 300 words do not fit 4,096 tokens whole"
    kept = {cut["passage_id"]: cut["chars_after"] for stage in listwise for cut in stage["details"]["fitted"]}
    texts = {json.loads(line)["id"]: json.loads(line)["text"]
             for line in (long_passages_index.parent / "corpus.jsonl").read_text().splitlines()}
    words_kept = {pid: len(texts[pid][:chars].split()) for pid, chars in kept.items()}
    # Wikipedia's words average 6.4 characters: GPT-3.5's own count would keep about 128 a passage here
    # (174 tokens at 4.7 bytes a token); the estimate keeps 6-7% fewer, the old one kept 61.
    assert len(words_kept) == 20, words_kept
    assert sum(words_kept.values()) / 20 >= 120 and min(words_kept.values()) >= 110, words_kept


def test_the_answer_notes_say_how_many_passages_were_cut_and_by_how_much():
    from winnow.report import fitting_note

    fitted = [{"passage_id": "p1", "chars_before": 1800, "chars_after": 720, "context_size": 4096,
               "token_counting": "estimated (about 4.4 ASCII characters …)"},
              {"passage_id": "p2", "chars_before": 200, "chars_after": 80, "context_size": 4096,
               "token_counting": "estimated (about 4.4 ASCII characters …)"}]
    assert fitting_note("listwise", fitted) == ("listwise: 2 passage(s) shortened to fit the model's context of 4096 "
                                                "tokens, 800 of their 2,000 characters kept (40%), counted in "
                                                "estimated tokens (--context-size raises it)")
