"""Winnow's own BM25 against Lucene (``--retriever lucene``) on the same corpus and queries, side by side.

Not a test: it prints figures (docs/benchmarks.md records them). The corpus is bench/bench_scale.py's
(synthetic ~100-word passages of sentences drawn, seeded, from the wiki-vital summaries, an MS MARCO-
layout TSV); the queries are 4-10 words of random sentences, k = 100. Each engine is built by
``winnow index`` in a fresh process under ``/usr/bin/time -v`` (Winnow's with ``--bm25-profile
pyserini``, Lucene's parameters; ``--shard-size`` optional; Lucene's with ``--bm25-engine lucene``, on
the cores this process may use), then searched in a fresh process per engine and mode (no result cache
carried from one to the other): every query alone, then all as one batch (``search_many``: Winnow's
batched scoring, Lucene's ``batch_search`` on one Java thread per core). Queries per CPU-second count
every thread of the process (the JVM's compiler and collector threads included). The top-100 overlap
is over the single-query lists: the mean share of Lucene's top 100 that Winnow's top 100 holds, and
how many lists are identical (ids and order) and how many scores agree to 3 decimals.

Usage: .venv/bin/python bench/bench_lucene.py --passages 100000 --workdir /tmp/winnow-lucene [--queries 1000]
       [--shard-size N] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import sentences, write_corpus  # noqa: E402  (the same corpus as the scale benchmark)

console = Console(stderr=True)
SERVE = r"""
import json, sys, time
path, engine, queries_file, k, mode, out = sys.argv[1:7]
queries, k = json.load(open(queries_file)), int(k)
if engine == "lucene":
    from winnow.index import LuceneIndex as Index
else:
    from winnow.index import BM25Index as Index
index = Index.open(path)
index.search(queries[0], k=k)  # opened and warmed once: the JVM's start is not a query's cost
started, cpu = time.perf_counter(), time.process_time()
if mode == "single":
    lists = [index.search(query, k=k) for query in queries]
else:
    lists = index.search_many(queries, k=k)
wall, cpu = time.perf_counter() - started, time.process_time() - cpu
json.dump([[[c.passage.id, c.score] for c in found] for found in lists], open(out, "w"))
print(json.dumps({"qps": len(queries) / wall, "cpu_qps": len(queries) / cpu}))
"""


def timed(command: list[str]) -> tuple[subprocess.CompletedProcess[str], dict[str, float]]:
    """``command`` under /usr/bin/time -v: its result, wall and CPU seconds and peak RSS (MB)."""
    result = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")

    def field(pattern: str) -> str:
        found = re.search(pattern, result.stderr)
        return found.group(1) if found else "0"

    seconds = 0.0
    for part in field(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)").split(":"):
        seconds = seconds * 60 + float(part)
    cpu = float(field(r"User time \(seconds\): ([\d.]+)")) + float(field(r"System time \(seconds\): ([\d.]+)"))
    return result, {"seconds": seconds, "cpu_seconds": cpu,
                    "peak_rss_mb": int(field(r"Maximum resident set size \(kbytes\): (\d+)")) / 1024}


def mb(*paths: Path) -> float:
    return sum(f.stat().st_size for path in paths for f in path.rglob("*") if f.is_file()) / 2**20


def overlap(ours: list[list[list[Any]]], theirs: list[list[list[Any]]], k: int) -> dict[str, float]:
    shares, identical, close, pairs = [], 0, 0, 0
    for mine, lucene in zip(ours, theirs, strict=True):
        if lucene:
            shares.append(len({i for i, _ in mine[:k]} & {i for i, _ in lucene[:k]}) / min(k, len(lucene)))
        identical += [i for i, _ in mine] == [i for i, _ in lucene]
        scores = dict((i, s) for i, s in lucene)
        for passage, score in mine:
            if passage in scores:
                pairs += 1
                close += round(score, 3) == round(scores[passage], 3)
    return {"overlap": sum(shares) / max(1, len(shares)), "identical_lists": identical,
            "scores_equal_3dp": close / max(1, pairs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shard-size", type=int, default=None, help="Winnow's BM25 in shards of this many passages")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/winnow-lucene"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    pool = sentences()
    corpus = args.workdir / f"corpus-{args.passages}.tsv"
    write_corpus(corpus, args.passages, args.seed, pool)
    rng = random.Random(args.seed + 1)
    queries_file = args.workdir / "queries.json"
    queries_file.write_text(json.dumps([" ".join(rng.choice(pool).split()[:rng.randint(4, 10)])
                                        for _ in range(args.queries)]))
    figures: dict[str, dict[str, Any]] = {}
    lists: dict[tuple[str, str], Any] = {}
    for engine, flags in (("winnow", ["--bm25-profile", "pyserini"] + (["--shard-size", str(args.shard_size)]
                                                                        if args.shard_size else [])),
                          ("lucene", ["--bm25-engine", "lucene"])):
        index = args.workdir / f"index-{engine}"
        shutil.rmtree(index, ignore_errors=True)
        _, build = timed([sys.executable, "-m", "winnow.cli", "index", str(corpus), "--out", str(index), *flags])
        postings = index / ("lucene" if engine == "lucene" else "bm25")
        row = {"build": build, "postings_mb": mb(postings), "store_mb": mb(index / "passages")}
        for mode in ("single", "batched"):
            out = args.workdir / f"lists-{engine}-{mode}.json"
            result, _ = timed([sys.executable, "-c", SERVE, str(index), engine, str(queries_file), str(args.k), mode,
                               str(out)])
            row[mode] = json.loads(result.stdout.strip().splitlines()[-1])
            lists[engine, mode] = json.loads(out.read_text())
        figures[engine] = row
        console.print(f"{engine}: {json.dumps(row)}")
    figures["agreement"] = overlap(lists["winnow", "single"], lists["lucene", "single"], args.k)
    figures["lucene_batched_equals_single"] = {"same": lists["lucene", "batched"] == lists["lucene", "single"]}
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    show(figures, args)


def show(figures: dict[str, Any], args: argparse.Namespace) -> None:
    own, lucene = figures["winnow"], figures["lucene"]
    table = Table(title=f"BM25 over {args.passages:,} synthetic passages, {args.queries:,} queries, k={args.k}",
                  title_justify="left")
    for column, justify in (("measure", "left"), ("Winnow (pyserini profile)", "right"), ("Lucene", "right"),
                            ("Winnow / Lucene", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]

    def add(measure: str, mine: float, theirs: float, unit: str, digits: int = 1) -> None:
        table.add_row(measure, f"{mine:,.{digits}f}{unit}", f"{theirs:,.{digits}f}{unit}", f"{mine / theirs:.2f}x")

    add("build wall", own["build"]["seconds"], lucene["build"]["seconds"], " s")
    add("build CPU", own["build"]["cpu_seconds"], lucene["build"]["cpu_seconds"], " s")
    add("build peak RSS", own["build"]["peak_rss_mb"], lucene["build"]["peak_rss_mb"], " MB", 0)
    add("postings on disk", own["postings_mb"], lucene["postings_mb"], " MB")
    add("index with passage store", own["postings_mb"] + own["store_mb"], lucene["postings_mb"] + lucene["store_mb"],
        " MB")
    add("single queries per CPU-second", own["single"]["cpu_qps"], lucene["single"]["cpu_qps"], "")
    add("single queries per second", own["single"]["qps"], lucene["single"]["qps"], "")
    add("batched queries per CPU-second", own["batched"]["cpu_qps"], lucene["batched"]["cpu_qps"], "")
    add("batched queries per second", own["batched"]["qps"], lucene["batched"]["qps"], "")
    Console().print(table)
    agreement = figures["agreement"]
    Console().print(f"top-{args.k} overlap with Lucene {agreement['overlap']:.3f}; identical lists "
                    f"{agreement['identical_lists']} of {args.queries}; scores equal to 3 decimals "
                    f"{agreement['scores_equal_3dp']:.1%} of shared pairs; Lucene batched = single: "
                    f"{figures['lucene_batched_equals_single']['same']}")


if __name__ == "__main__":
    main()
