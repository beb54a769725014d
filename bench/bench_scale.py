"""BM25 at scale: a synthetic corpus of N passages built from real sentences, indexed in shards.

Not a test: it prints figures (docs/benchmarks.md records them). Passages of about 100 words are
made by drawing sentences at random (seeded) from the 10,033 Wikipedia vital-article summaries (the
wiki-vital corpus package), written as an MS MARCO-layout TSV (``id<TAB>text``). Then, each in a
fresh process under ``/usr/bin/time -v``:

* build: ``winnow index corpus.tsv --out IDX --shard-size S`` (or without ``--shard-size``, bm25s's
  single in-memory build, for comparison): wall time and peak resident memory;
* serve: open the index, then queries of 4-10 words taken from random sentences, k = 100, one at a
  time and as one batch: open time, queries/s (and per CPU-second), and memory after the queries
  split into anonymous memory (what serving costs beyond the files) and file-backed pages (the
  memory-mapped index, which the kernel may drop and read again), plus the process's peak. The
  single queries and the batch each run in a fresh process: timed after the single queries in one
  process, the batch found their last answers in the index's result cache (256 of 1,000 at 2M
  passages, 1.44x its true rate; issue 42).

Usage: .venv/bin/python bench/bench_scale.py --passages 1000000 --shard-size 250000 --workdir /tmp/scale
       [--single] [--queries 1000] [--json] [--gzip]
The corpus file is reused when it already exists with the same size and seed, and a killed build
resumes from its last finished shard when the command is run again (its wall time then counts the
resumed part only).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

console = Console(stderr=True)
WHITE_SPACE = re.compile(r"[\t\r\n]")
SERVE = r"""
import json, os, random, sys, time
from winnow.index import BM25Index

def status():
    fields = {}
    for line in open("/proc/self/status"):
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields

path, queries_file, k, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
queries = json.load(open(queries_file))
before = status()
started = time.perf_counter()
index = BM25Index.open(path)
opened = time.perf_counter() - started
after_open = status()
def cpu_seconds():  # this process and its ended children (the scoring workers, once closed)
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system

started, cpu = time.perf_counter(), cpu_seconds()
if mode == "single":
    for query in queries:
        index.search(query, k=k)
else:  # a fresh process: nothing in the index's result cache; scored on every core
    index.search_many(queries, k=k)
wall = time.perf_counter() - started
index.close()
cpu = cpu_seconds() - cpu
after = status()
print(json.dumps({"open_seconds": opened, f"{mode}_qps": len(queries) / wall, f"{mode}_cpu_qps": len(queries) / cpu,
                  "before_mb": before, "after_open_mb": after_open, "after_queries_mb": after}))
"""


def sentences() -> list[str]:
    from winnow.corpus import load_corpus, split_sentences

    found = []
    for passage in load_corpus("wiki-vital").passages:
        found += [s for s in split_sentences(passage.text) if 5 <= len(s.split()) <= 60]
    return found


def write_corpus(path: Path, passages: int, seed: int, pool: list[str]) -> None:
    marker = path.with_suffix(".json")
    if path.is_file() and marker.is_file() and json.loads(marker.read_text()) == {"passages": passages, "seed": seed}:
        return
    rng = random.Random(seed)
    started = time.perf_counter()
    # gzip level 1: a 21M-passage corpus is 14 GB as text, a third of that compressed, quickly
    target = (gzip.open(path, "wt", encoding="utf-8", compresslevel=1) if path.name.endswith(".gz")
              else path.open("w", encoding="utf-8"))
    with target as out:
        for number in range(passages):
            words, chosen = 0, []
            while words < 100:
                sentence = rng.choice(pool)
                chosen.append(sentence)
                words += len(sentence.split())
            text = WHITE_SPACE.sub(" ", " ".join(chosen))
            out.write(f"p{number}\t{text}\n")
    marker.write_text(json.dumps({"passages": passages, "seed": seed}))
    console.print(f"wrote {passages:,} passages ({path.stat().st_size / 2**20:,.0f} MB) in "
                  f"{time.perf_counter() - started:.0f} s")


def timed(command: list[str]) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Run ``command`` under /usr/bin/time -v; its result and (wall seconds, peak RSS MB)."""
    result = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", result.stderr)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", result.stderr)
    seconds = 0.0
    for part in (wall.group(1) if wall else "0").split(":"):
        seconds = seconds * 60 + float(part)
    return result, {"seconds": seconds, "peak_rss_mb": int(peak.group(1)) / 1024 if peak else None}


def folder_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--shard-size", type=int, default=250_000)
    parser.add_argument("--single", action="store_true", help="bm25s's single in-memory build instead of shards")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/winnow-scale"))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--gzip", action="store_true", help="write the corpus as .tsv.gz (DPR ships psgs_w100.tsv.gz)")
    parser.add_argument("--index-args", default="",
                        help='more options for winnow index, e.g. "--bm25-impacts float16 --bm25-profile pyserini"')
    parser.add_argument("--skip-build", action="store_true",
                        help="search the index the last run built in --workdir (its build figures are not repeated)")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    pool = sentences()
    corpus = args.workdir / f"corpus-{args.passages}.tsv{'.gz' if args.gzip else ''}"
    write_corpus(corpus, args.passages, args.seed, pool)
    index = args.workdir / ("index-single" if args.single else "index-sharded")
    if args.skip_build:
        if not (index / "manifest.json").is_file():
            raise SystemExit(f"--skip-build: no finished index at {index}; run once without --skip-build")
        build: dict[str, Any] = {"seconds": None, "peak_rss_mb": None}
    else:
        shutil.rmtree(index, ignore_errors=True)
        command = [sys.executable, "-m", "winnow.cli", "index", str(corpus), "--out", str(index),
                   *args.index_args.split()]
        if not args.single:
            command += ["--shard-size", str(args.shard_size)]
        _, build = timed(command)
        console.print(f"built in {build['seconds']:.0f} s, peak {build['peak_rss_mb']:,.0f} MB")
    rng = random.Random(args.seed + 1)
    queries = [" ".join(rng.choice(pool).split()[:rng.randint(4, 10)]) for _ in range(args.queries)]
    queries_file = args.workdir / "queries.json"
    queries_file.write_text(json.dumps(queries))
    result, serve_time = timed([sys.executable, "-c", SERVE, str(index), str(queries_file), str(args.k), "single"])
    serve = json.loads(result.stdout.strip().splitlines()[-1])
    result, _ = timed([sys.executable, "-c", SERVE, str(index), str(queries_file), str(args.k), "batched"])
    batch = json.loads(result.stdout.strip().splitlines()[-1])
    serve.update(batched_qps=batch["batched_qps"], batched_cpu_qps=batch["batched_cpu_qps"])
    figures = {"passages": args.passages, "layout": "single" if args.single else f"shards of {args.shard_size:,}",
               "corpus_mb": corpus.stat().st_size / 2**20, "build_seconds": build["seconds"],
               "build_peak_rss_mb": build["peak_rss_mb"], "index_mb": folder_mb(index),
               "serve_peak_rss_mb": serve_time["peak_rss_mb"], **serve, "k": args.k, "queries": args.queries}
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    table = Table(title=f"BM25 over {args.passages:,} synthetic passages ({figures['layout']})", title_justify="left")
    table.add_column("measure")
    table.add_column("value", justify="right")
    after_open, after = serve["after_open_mb"], serve["after_queries_mb"]
    for measure, value in [
        ("corpus (TSV)", f"{figures['corpus_mb']:,.0f} MB"),
        ("build wall time", "-" if build["seconds"] is None else f"{build['seconds']:,.0f} s"),
        ("build peak RSS", "-" if build["peak_rss_mb"] is None else f"{build['peak_rss_mb']:,.0f} MB"),
        ("index on disk", f"{figures['index_mb']:,.0f} MB"),
        ("open", f"{serve['open_seconds']:.2f} s"),
        ("RSS after open: anonymous / file-backed", f"{after_open['RssAnon']:,.0f} / {after_open['RssFile']:,.0f} MB"),
        (f"single queries (k={args.k})", f"{serve['single_qps']:,.1f} q/s, {serve['single_cpu_qps']:,.1f} per CPU-s"),
        (f"batched, {args.queries} queries (k={args.k}), a fresh process",
         f"{serve['batched_qps']:,.1f} q/s, {serve['batched_cpu_qps']:,.1f} per CPU-s"),
        ("RSS after queries: anonymous / file-backed", f"{after['RssAnon']:,.0f} / {after['RssFile']:,.0f} MB"),
        ("serving process peak RSS", f"{serve_time['peak_rss_mb']:,.0f} MB"),
    ]:
        table.add_row(measure, value)
    Console().print(table)


if __name__ == "__main__":
    main()
