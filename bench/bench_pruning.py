"""Pruned (MaxScore) against exhaustive BM25, side by side on one synthetic corpus (not a test).

The corpus is bench_scale.py's: passages of about 100 words drawn sentence by sentence (seeded) from
the wiki-vital summaries, queries of 4-10 words from random sentences, k = 100. The index is built in
shards with ``winnow index --shard-size`` in a fresh process (wall time and peak RSS under
``/usr/bin/time -v``). Then, in one process, after a warm-up pass that maps the score arrays:

* single queries: ``search`` one at a time, each mode on its own freshly opened index (so the
  result cache answers nothing), CPU seconds by ``time.process_time``;
* batched: ``search_many`` of all queries, again on fresh indexes;
* identity: every query's top k from both modes, ids and float32 scores compared exactly.

The order of the two modes alternates over ``--repeats`` rounds and each figure is the best round
(the machine is shared: the load average is printed before and after).

Usage: .venv/bin/python bench/bench_pruning.py --passages 300000 --shard-size 100000 --workdir /tmp/prune
       [--queries 1000] [--k 100] [--repeats 2] [--keep-index] [--single] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))
from bench_scale import folder_mb, sentences, timed, write_corpus  # noqa: E402

from winnow.index import BM25Index  # noqa: E402

console = Console(stderr=True)
MODES = ("exhaustive", "pruned")


def open_mode(index: Path, mode: str) -> BM25Index:
    return BM25Index.open(index, exhaustive=mode == "exhaustive")


def cpu_rate(work: Any, count: int) -> dict[str, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"qps": count / wall, "cpu_qps": count / cpu}


def measure(index: Path, queries: list[str], k: int, repeats: int) -> dict[str, dict[str, float]]:
    """Each mode's best single-query and batched rates over ``repeats`` rounds, the order alternating."""
    found: dict[str, dict[str, float]] = {mode: {} for mode in MODES}
    for round_number in range(repeats):
        for mode in MODES if round_number % 2 == 0 else MODES[::-1]:
            one, batch = open_mode(index, mode), open_mode(index, mode)  # each with an empty result cache
            single = cpu_rate(lambda: [one.search(q, k=k) for q in queries], len(queries))  # noqa: B023
            batched = cpu_rate(lambda: batch.search_many(queries, k=k), len(queries))  # noqa: B023
            for name, rate in (("single", single), ("batched", batched)):
                for key, value in rate.items():
                    found[mode][f"{name}_{key}"] = max(found[mode].get(f"{name}_{key}", 0.0), value)
    return found


def identical(index: Path, queries: list[str], k: int) -> dict[str, int]:
    """How many queries get the same top k (ids and scores, exactly) from both modes."""
    pruned = open_mode(index, "pruned").search_many(queries, k=k)
    exhaustive = open_mode(index, "exhaustive").search_many(queries, k=k)
    same = sum([(c.passage.id, c.score) for c in a] == [(c.passage.id, c.score) for c in b]
               for a, b in zip(pruned, exhaustive, strict=True))
    return {"identical": same, "compared": len(queries), "hits": sum(len(a) for a in exhaustive)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passages", type=int, default=300_000)
    parser.add_argument("--shard-size", type=int, default=100_000)
    parser.add_argument("--single", action="store_true", help="bm25s's single matrix instead of shards")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/winnow-pruning"))
    parser.add_argument("--keep-index", action="store_true", help="reuse the index a previous run built")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    pool = sentences()
    corpus = args.workdir / f"corpus-{args.passages}.tsv"
    write_corpus(corpus, args.passages, args.seed, pool)
    index = args.workdir / ("index-single" if args.single else f"index-{args.passages}-{args.shard_size}")
    build: dict[str, Any] = {"seconds": None, "peak_rss_mb": None}
    if not (args.keep_index and (index / "manifest.json").is_file()):
        shutil.rmtree(index, ignore_errors=True)
        command = [sys.executable, "-m", "winnow.cli", "index", str(corpus), "--out", str(index)]
        _, build = timed(command + ([] if args.single else ["--shard-size", str(args.shard_size)]))
        console.print(f"built in {build['seconds']:.0f} s, peak {build['peak_rss_mb']:,.0f} MB")
    rng = random.Random(args.seed + 1)
    queries = [" ".join(rng.choice(pool).split()[:rng.randint(4, 10)]) for _ in range(args.queries)]
    warm = [" ".join(rng.choice(pool).split()[:rng.randint(4, 10)]) for _ in range(200)]
    open_mode(index, "exhaustive").search_many(warm, k=args.k)  # maps the arrays' pages before timing
    rates = measure(index, queries, args.k, args.repeats)
    check = identical(index, queries, args.k)
    figures = {"passages": args.passages, "layout": "single" if args.single else f"shards of {args.shard_size:,}",
               "k": args.k, "queries": args.queries, "build": build, "index_mb": folder_mb(index),
               "maxima_mb": sum(f.stat().st_size for f in index.rglob("maxima.npy")) / 2**20, "rates": rates,
               "identity": check, "load_average": {"before": load_before, "after": os.getloadavg()}}
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    table = Table(title=f"BM25 over {args.passages:,} synthetic passages ({figures['layout']}), k = {args.k}, "
                        f"{args.queries:,} queries", title_justify="left")
    for column in ("measure", *MODES, "pruned / exhaustive"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    for key, label in (("single_cpu_qps", "single queries per CPU-second"), ("single_qps", "single queries/s (wall)"),
                       ("batched_cpu_qps", "batched per CPU-second"), ("batched_qps", "batched queries/s (wall)")):
        slow, fast = rates["exhaustive"][key], rates["pruned"][key]
        table.add_row(label, f"{slow:,.1f}", f"{fast:,.1f}", f"{fast / slow:.2f}×")
    Console().print(table)
    Console().print(f"identical top {args.k} (ids and scores): {check['identical']:,} of {check['compared']:,} "
                    f"queries ({check['hits']:,} hits); index {figures['index_mb']:,.0f} MB, of which per-term "
                    f"maxima {figures['maxima_mb']:.1f} MB; load average before "
                    f"{' '.join(f'{x:.1f}' for x in load_before)}, after "
                    f"{' '.join(f'{x:.1f}' for x in figures['load_average']['after'])}")


if __name__ == "__main__":
    main()
