"""Foundation benchmark on the 10,033 wiki-vital passages (not a test: it prints figures).

1. Index build time and peak memory, index size, BM25 queries/s (single and batched).
2. The RankRAG reranker's scoring rate (passages/s, prompt tokens/s) next to the raw prefill rate of
   the same model on the same prompts, measured in the same run, and their ratio: everything the
   reranker adds outside the model (prompt rendering, cache look-ups, parsing, bookkeeping) shows up
   as the gap. Target: under 5% of the model's own time.

Usage: .venv/bin/python bench/bench_foundation.py [--model qwen2.5-coder-0.5b] [--queries 4] [--n 10]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from winnow.corpus import load_corpus
from winnow.index import BM25Index, build_bm25_index
from winnow.llm import LLM
from winnow.llm.llamacpp import LlamaCppBackend
from winnow.llm.openai_format import choice_request
from winnow.models import resolve_model
from winnow.records import Trace
from winnow.stages import PointwiseTrueReranker

QUERIES = ("who painted the mona lisa", "what is the largest planet in the solar system",
           "who wrote on the origin of species", "what is the capital of australia",
           "when did the first world war begin", "who discovered penicillin")

console = Console()


BUILD_SCRIPT = """
import json, resource, sys, time
from winnow.corpus import load_corpus
from winnow.index import build_bm25_index
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
passages = load_corpus("wiki-vital").passages
loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
build_bm25_index(passages, sys.argv[1], source="wiki-vital", source_checksum="", overwrite=True, progress=False)
seconds = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"build_seconds": seconds, "peak_rss_mb": peak / 1024, "corpus_rss_mb": loaded / 1024,
                  "interpreter_rss_mb": before / 1024}))
"""


def bm25_figures(workdir: Path, queries: list[str], k: int = 20) -> dict:
    """Build the index in a fresh process (so its peak resident memory is the build's own, numpy
    included), then time single and batched queries."""
    out = workdir / "wiki-vital-index"
    build = json.loads(subprocess.run([sys.executable, "-c", BUILD_SCRIPT, str(out)], check=True,
                                      capture_output=True, text=True).stdout)
    index = BM25Index.open(out)
    started = time.perf_counter()
    for query in queries:
        index.search(query, k=k)
    single = len(queries) / (time.perf_counter() - started)
    started = time.perf_counter()
    index.search_many(queries, k=k)
    batched = len(queries) / (time.perf_counter() - started)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    return {**build, "index_path": str(out), "index_mb": size / 2**20, "passages": len(index),
            "queries": len(queries), "k": k, "single_qps": single, "batched_qps": batched}


class TimedServer:
    """Passes calls to llama.cpp and adds up the time llama.cpp itself reports spending on them."""

    def __init__(self, server) -> None:
        self.server = server
        self.model_ms = 0.0

    def handle_chat_completions(self, body):
        response = self.server.handle_chat_completions(body)
        timings = response.get("timings") or {}
        self.model_ms += timings.get("prompt_ms", 0.0) + timings.get("predicted_ms", 0.0)
        return response


def rerank_vs_prefill(index: BM25Index, model: str, queries: list[str], n: int) -> dict:
    """The reranker's time against the model's own time on the same prompts, two ways:
    (a) the time llama.cpp reports for the reranker's own calls, and (b) raw llama.cpp calls on the
    same prompts, made without the reranker. Raw and reranker runs alternate which goes first per
    query so warm-up and machine noise hit both alike; no call cache is used."""
    resolved = resolve_model(model)
    backend = LlamaCppBackend(resolved.path, model_name=resolved.name, model_sha256=resolved.sha256)
    timed = TimedServer(backend._server)
    backend._server = timed
    reranker = PointwiseTrueReranker(LLM(backend, cache=None))
    raw_seconds = stage_seconds = stage_model_seconds = 0.0
    raw_tokens = passages = 0
    backend.generate([[{"role": "user", "content": "warm up"}]], max_tokens=1)
    for number, text in enumerate(queries):
        candidates = index.search(text, k=n)
        prompts = [reranker.template.messages(text, [p]) for p in candidates.passages]

        def raw() -> float:
            nonlocal raw_tokens
            started = time.perf_counter()
            for messages in prompts:
                response = timed.server.handle_chat_completions(choice_request(messages, top_logprobs=100))
                raw_tokens += response["usage"]["prompt_tokens"]
            return time.perf_counter() - started

        def staged() -> tuple[float, float]:
            before = timed.model_ms
            started = time.perf_counter()
            reranker.run(candidates, Trace())
            return time.perf_counter() - started, (timed.model_ms - before) / 1000

        if number % 2:
            raw_seconds += raw()
            wall, model_s = staged()
        else:
            wall, model_s = staged()
            raw_seconds += raw()
        stage_seconds += wall
        stage_model_seconds += model_s
        passages += len(prompts)
    backend.close()
    return {
        "model": model, "queries": len(queries), "passages": passages, "prompt_tokens": raw_tokens,
        "raw_seconds": raw_seconds, "reranker_seconds": stage_seconds,
        "reranker_model_seconds": stage_model_seconds,
        "raw_passages_per_s": passages / raw_seconds, "reranker_passages_per_s": passages / stage_seconds,
        "raw_prompt_tokens_per_s": raw_tokens / raw_seconds,
        "reranker_prompt_tokens_per_s": raw_tokens / stage_seconds,
        "overhead_vs_reported_model_time": stage_seconds / stage_model_seconds - 1.0,
        "ratio_vs_raw_calls": stage_seconds / raw_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--queries", type=int, default=4)
    parser.add_argument("--n", type=int, default=10)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/winnow-bench"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    corpus = load_corpus("wiki-vital")
    # Queries made from passage titles and first sentences: realistic lengths, all answerable.
    queries = [p.title for p in corpus.passages[::10]] + [p.text.split(". ")[0] for p in corpus.passages[5::10]]
    bm25 = bm25_figures(args.workdir, queries)
    index = BM25Index.open(bm25["index_path"])
    llm = rerank_vs_prefill(index, args.model, list(QUERIES[: args.queries]), args.n)
    if args.json:
        print(json.dumps({"bm25": bm25, "rerank": llm}, indent=2, default=str))
        return
    figures = Table(title="BM25 index on wiki-vital")
    figures.add_column("figure")
    figures.add_column("value", justify="right")
    figures.add_row("passages", str(bm25["passages"]))
    figures.add_row("build seconds (load excluded)", f"{bm25['build_seconds']:.2f}")
    figures.add_row("peak RSS of the build process, MB", f"{bm25['peak_rss_mb']:.0f}")
    figures.add_row("  of which corpus loaded, MB", f"{bm25['corpus_rss_mb']:.0f}")
    figures.add_row("index size on disk, MB", f"{bm25['index_mb']:.1f}")
    figures.add_row(f"queries/s, one at a time (k={bm25['k']}, {bm25['queries']} queries)", f"{bm25['single_qps']:.0f}")
    figures.add_row("queries/s, batched", f"{bm25['batched_qps']:.0f}")
    console.print(figures)
    table = Table(title=f"RankRAG reranker vs raw prefill ({llm['model']}, {llm['passages']} passages)")
    table.add_column("figure")
    table.add_column("raw llama.cpp", justify="right")
    table.add_column("reranker", justify="right")
    table.add_row("seconds", f"{llm['raw_seconds']:.2f}", f"{llm['reranker_seconds']:.2f}")
    table.add_row("passages/s", f"{llm['raw_passages_per_s']:.2f}", f"{llm['reranker_passages_per_s']:.2f}")
    table.add_row("prompt tokens/s", f"{llm['raw_prompt_tokens_per_s']:.1f}",
                  f"{llm['reranker_prompt_tokens_per_s']:.1f}")
    console.print(table)
    console.print(f"reranker time / raw llama.cpp time on the same prompts: {llm['ratio_vs_raw_calls']:.3f}")
    console.print(f"reranker overhead outside the model (wall time vs the time llama.cpp reports for the "
                  f"reranker's own calls): {100 * llm['overhead_vs_reported_model_time']:+.2f}% (target < 5%)")


if __name__ == "__main__":
    main()
