"""What the call cache's size limit costs (not a test: it prints figures). Issue 30, item 7.

Writes ``--entries`` answers of ``--answer-bytes`` each into a fresh ``CallCache`` twice: with a
limit far above what is written (the size check on every write, no eviction) and with ``--limit``
(the check plus the evictions it makes), then reads every key back. Prints microseconds per put and
per get, entries kept and evicted, and the live and on-disk sizes against the limit.

Usage: .venv/bin/python bench/bench_cache.py [--entries 20000] [--answer-bytes 1000] [--limit 5MB]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from winnow.llm.cache import CallCache, human_size, parse_size


def run(folder: Path, name: str, entries: int, answer_bytes: int, limit: int) -> None:
    cache = CallCache(folder / f"{name}.sqlite", max_bytes=limit)
    answer = {"text": "x" * answer_bytes, "prompt_tokens": 100, "completion_tokens": 8, "seconds": 0.5}
    started = time.perf_counter()
    for i in range(entries):
        cache.put(f"{i:064x}", "generate", answer)
    put_us = (time.perf_counter() - started) / entries * 1e6
    started = time.perf_counter()
    hits = sum(cache.get(f"{i:064x}") is not None for i in range(entries))
    get_us = (time.perf_counter() - started) / entries * 1e6
    print(f"{name:>10}: put {put_us:6.0f} µs, get {get_us:5.0f} µs; kept {hits:,} of {entries:,} "
          f"(evicted {cache.evicted():,}); live {human_size(cache.size_bytes())}, "
          f"on disk {human_size(cache.file_bytes())}, limit {human_size(limit)}")
    cache.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--answer-bytes", type=int, default=1000)
    parser.add_argument("--limit", default="5MB")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        run(Path(folder), "unbounded", args.entries, args.answer_bytes, 10**12)
        run(Path(folder), "bounded", args.entries, args.answer_bytes, parse_size(args.limit))


if __name__ == "__main__":
    main()
