"""A real `winnow serve` process on 127.0.0.1 (any free port) for the service and inspector tests."""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
from fast_model import suite_model
from small_corpus import PASSAGES

from winnow.corpus import load_corpus
from winnow.index import build_bm25_index

MODEL = suite_model()

LISTENING = re.compile(r"listening on (http://[^/\s]+)/")


def build_small_index(folder: Path) -> Path:
    """The eight-passage corpus of tests/small_corpus.py as a real BM25 index folder."""
    source = folder / "corpus.jsonl"
    source.write_text("\n".join(json.dumps(p) for p in PASSAGES) + "\n")
    build_bm25_index(load_corpus(source).passages, folder / "index", source=str(source), source_checksum="x",
                     progress=False)
    return folder / "index"


@contextmanager
def running_server(index_dir: Path, cache_dir: Path, *args: str, api_key: str = "",
                   startup_timeout: float = 120.0, log: list[str] | None = None,
                   model: str | None = MODEL) -> Iterator[str]:
    """Start `winnow serve` with smollm2-135m (or ``model``; None: the one ``args`` name, a
    ``--config`` file's say) on one llama.cpp thread; yield its base URL.
    The server's stderr lines are appended to ``log`` as they arrive, when one is given."""
    env = dict(os.environ, WINNOW_CACHE_DIR=str(cache_dir))
    env.pop("WINNOW_API_KEY", None)
    if api_key:
        env["WINNOW_API_KEY"] = api_key
    command = [sys.executable, "-m", "winnow.cli", "serve", "--index", str(index_dir),
               *(["--model", model] if model else []), "--port", "0", "--threads", "1", *args]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    log = [] if log is None else log

    def drain() -> None:  # keep reading stderr so the server never blocks on a full pipe
        for line in process.stderr:  # type: ignore[union-attr]
            log.append(line)
            lines.put(line)

    threading.Thread(target=drain, daemon=True).start()
    try:
        deadline = time.monotonic() + startup_timeout
        base = None
        while base is None:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"winnow serve did not start: {''.join(log)}")
            try:
                match = LISTENING.search(lines.get(timeout=0.5))
            except queue.Empty:
                continue
            base = match.group(1) if match else None
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"winnow serve did not answer /healthz: {''.join(log)}")
            time.sleep(0.1)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_for(condition: Callable[[], Any], timeout: float = 60.0, interval: float = 0.05,
             what: str = "the condition") -> Any:
    """Poll ``condition()`` until it returns something truthy; return that, or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def queue_stats(client: httpx.Client) -> dict[str, Any]:
    """The worker queue's counters from /healthz (pending, running, completed, cancelled, refused...)."""
    return client.get("/healthz").json()["queue"]
