"""Index files changed under a running `winnow serve`: refused with a 503 naming the file, never a dead server."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest
from service_server import build_small_index, running_server

from winnow.index.watch import IndexWatch


def largest_file(index: Path) -> str:
    """The largest file the manifest lists (a memory-mapped array or the passage records)."""
    files = json.loads((index / "manifest.json").read_text())["files"]
    return max(files, key=lambda name: files[name]["size"])


def test_a_same_size_edit_a_replacement_and_a_removal_are_each_seen(tmp_path):
    index = build_small_index(tmp_path)
    name = largest_file(index)
    watch = IndexWatch.of(index)
    assert watch.changed() is None
    data = bytearray((index / name).read_bytes())
    data[-1] ^= 0xFF
    stat = os.stat(index / name)
    (index / name).write_bytes(bytes(data))
    os.utime(index / name, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the mtime put back: the ctime still moves
    assert os.stat(index / name).st_size == stat.st_size
    assert watch.changed() == name
    assert IndexWatch.of(index).changed() is None  # a fresh watch (a restarted server) sees the index as it is now
    fresh = IndexWatch.of(index)
    (index / name).unlink()
    assert fresh.changed() == name


@pytest.mark.subprocess
@pytest.mark.llm
def test_a_file_truncated_under_serve_gives_503s_naming_it_and_the_server_lives(tmp_path):
    index = build_small_index(tmp_path)
    log: list[str] = []
    with running_server(index, tmp_path / "cache", log=log) as base:
        assert httpx.get(f"{base}/v1/search", params={"q": "glacier"}, timeout=30).status_code == 200
        name = largest_file(index)
        with open(index / name, "r+b") as handle:
            handle.truncate(0)
        for attempt in range(3):  # every request after the change, not just the first
            refused = httpx.get(f"{base}/v1/search", params={"q": f"glacier {attempt}"}, timeout=30)
            assert refused.status_code == 503
            error = refused.json()["error"]
            assert error["type"] == "index_changed"
            assert str(index / name) in error["message"] and "restart `winnow serve`" in error["message"]
        asked = httpx.post(f"{base}/v1/ask", json={"question": "which ice moves?"}, timeout=60)
        assert asked.status_code == 503 and asked.json()["error"]["type"] == "index_changed"
        assert httpx.get(f"{base}/healthz", timeout=30).status_code == 200  # alive, not killed by SIGBUS
    assert any("changed since the server opened" in line for line in log)
