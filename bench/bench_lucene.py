"""Winnow's own BM25 against Lucene (``--retriever lucene``) on the same corpus and queries, side by side.

Not a test: it prints figures (docs/benchmarks.md records them). The corpus is bench/bench_scale.py's
(synthetic ~100-word passages of sentences drawn, seeded, from the wiki-vital summaries, an MS MARCO-
layout TSV); the queries are 4-10 words of random sentences, k = 100. Each engine is built by
``winnow index`` in a fresh process under ``/usr/bin/time -v`` (Winnow's with ``--bm25-profile
pyserini``, Lucene's parameters; ``--shard-size`` optional; Lucene's with ``--bm25-engine lucene``, on
the cores this process may use), then searched in a fresh process per engine and mode (no result cache
carried from one to the other): every query alone, then all as one batch (``search_many``: Winnow's
batched scoring on every core (this process and worker processes), Lucene's ``batch_search`` on one
Java thread per core). Queries per CPU-second count every thread of the process (the JVM's compiler
and collector threads included) and Winnow's scoring workers. The top-100 overlap
is over the single-query lists: the mean share of Lucene's top 100 that Winnow's top 100 holds, and
how many lists are identical (ids and order) and how many scores agree to 3 decimals.

``--bm25-impacts float32,uint8`` builds and measures one Winnow index per impact format (``winnow index
--bm25-impacts``); each lossy format's lists are also compared with float32's (the same overlap measure,
float32's lists in the place of Lucene's). The index sizes: the postings (``bm25/`` or ``lucene/``), the
passage store, and the whole folder; the target of issue 42 is Winnow's whole index at most 3× Lucene's
postings plus the passage store.

Usage: .venv/bin/python bench/bench_lucene.py --passages 100000 --workdir /tmp/winnow-lucene [--queries 1000]
       [--shard-size N] [--bm25-impacts float32,float16,uint8] [--json] [--skip-build]
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
import json, os, sys, time
path, engine, queries_file, k, mode, out = sys.argv[1:7]
queries, k = json.load(open(queries_file)), int(k)
if engine == "lucene":
    from winnow.index import LuceneIndex as Index
else:
    from winnow.index import BM25Index as Index
index = Index.open(path)
index.search(queries[0], k=k)  # opened and warmed once: the JVM's start is not a query's cost
def cpu_seconds():  # this process and its ended children (Winnow's scoring workers, once closed)
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system

started, cpu = time.perf_counter(), cpu_seconds()
if mode == "single":
    lists = [index.search(query, k=k) for query in queries]
else:
    lists = index.search_many(queries, k=k)
wall = time.perf_counter() - started
getattr(index, "close", lambda: None)()  # Winnow's workers end (and are counted) before the CPU is read
cpu = cpu_seconds() - cpu
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
    parser.add_argument("--bm25-impacts", default="float32", help="Winnow's impact formats to build, comma-separated")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/winnow-lucene"))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--skip-build", action="store_true",
                        help="search the indexes the last run built in --workdir again (no build figures)")
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
    formats = args.bm25_impacts.split(",")
    sharding = ["--shard-size", str(args.shard_size)] if args.shard_size else []
    engines = [(f"winnow-{name}", ["--bm25-profile", "pyserini", *sharding, "--bm25-impacts", name])
               for name in formats]
    for engine, flags in [*engines, ("lucene", ["--bm25-engine", "lucene"])]:
        figures[engine] = measure_engine(engine, flags, corpus, queries_file, args, lists)
        console.print(f"{engine}: {json.dumps(figures[engine])}")
    for engine, _ in engines:
        figures[engine]["agreement"] = overlap(lists[engine, "single"], lists["lucene", "single"], args.k)
        if "float32" in formats and engine != "winnow-float32":
            figures[engine]["against_float32"] = overlap(lists[engine, "single"], lists["winnow-float32", "single"],
                                                         args.k)
    figures["lucene_batched_equals_single"] = {"same": lists["lucene", "batched"] == lists["lucene", "single"]}
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    show(figures, args, [engine for engine, _ in engines])


def measure_engine(engine: str, flags: list[str], corpus: Path, queries_file: Path, args: argparse.Namespace,
                   lists: dict[tuple[str, str], Any]) -> dict[str, Any]:
    """Build ``engine``'s index with ``flags`` in a fresh process, then search it single and batched."""
    index = args.workdir / f"index-{engine}"
    if args.skip_build:
        if not (index / "manifest.json").is_file():
            raise SystemExit(f"--skip-build: no finished index at {index}; run once without --skip-build")
        build: dict[str, float] = {"seconds": float("nan"), "cpu_seconds": float("nan"), "peak_rss_mb": float("nan")}
    else:
        shutil.rmtree(index, ignore_errors=True)
        _, build = timed([sys.executable, "-m", "winnow.cli", "index", str(corpus), "--out", str(index), *flags])
    postings = index / ("lucene" if engine == "lucene" else "bm25")
    row: dict[str, Any] = {"build": build, "postings_mb": mb(postings), "store_mb": mb(index / "passages"),
                           "index_mb": mb(index)}
    for mode in ("single", "batched"):
        out = args.workdir / f"lists-{engine}-{mode}.json"
        result, _ = timed([sys.executable, "-c", SERVE, str(index), "lucene" if engine == "lucene" else "winnow",
                           str(queries_file), str(args.k), mode, str(out)])
        row[mode] = json.loads(result.stdout.strip().splitlines()[-1])
        lists[engine, mode] = json.loads(out.read_text())
    return row


def pick(row: dict[str, Any], path: tuple[str, ...]) -> float:
    found: Any = row
    for key in path:
        found = found[key]
    return float(found)


def show(figures: dict[str, Any], args: argparse.Namespace, engines: list[str]) -> None:
    lucene = figures["lucene"]
    table = Table(title=f"BM25 over {args.passages:,} synthetic passages, {args.queries:,} queries, k={args.k}"
                        + (f", Winnow in shards of {args.shard_size:,}" if args.shard_size else ""),
                  title_justify="left")
    table.add_column("measure")
    for engine in engines:
        table.add_column(f"{engine} (pyserini profile)", justify="right")
        table.add_column("÷ Lucene", justify="right")
    table.add_column("Lucene", justify="right")
    target = 3 * lucene["postings_mb"] + lucene["store_mb"]
    for measure, path, unit, digits in (
            ("build wall", ("build", "seconds"), " s", 1),
            ("build CPU", ("build", "cpu_seconds"), " s", 1),
            ("build peak RSS", ("build", "peak_rss_mb"), " MB", 0),
            ("postings on disk", ("postings_mb",), " MB", 1),
            ("whole index (postings, passage store, manifest)", ("index_mb",), " MB", 1),
            ("single queries per CPU-second", ("single", "cpu_qps"), "", 1),
            ("single queries per second", ("single", "qps"), "", 1),
            ("batched queries per CPU-second", ("batched", "cpu_qps"), "", 1),
            ("batched queries per second", ("batched", "qps"), "", 1)):
        theirs = pick(lucene, path)
        if theirs != theirs:  # NaN: not measured (--skip-build's build rows)
            continue
        cells = []
        for engine in engines:
            mine = pick(figures[engine], path)
            cells += [f"{mine:,.{digits}f}{unit}", f"{mine / theirs:.2f}x"]
        table.add_row(measure, *cells, f"{theirs:,.{digits}f}{unit}")
    Console().print(table)
    Console().print(f"target (3 × Lucene's postings + the passage store): {target:,.1f} MB")
    for engine in engines:
        for against, name in (("agreement", "Lucene"), ("against_float32", "winnow-float32")):
            if against in figures[engine]:
                found = figures[engine][against]
                Console().print(f"{engine}: top-{args.k} overlap with {name} {found['overlap']:.3f}; identical lists "
                                f"{found['identical_lists']} of {args.queries}; scores equal to 3 decimals "
                                f"{found['scores_equal_3dp']:.1%} of shared pairs")
    Console().print(f"Lucene batched = single: {figures['lucene_batched_equals_single']['same']}")


if __name__ == "__main__":
    main()
