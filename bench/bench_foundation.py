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
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))
from bench_bm25 import figures_table, run_bm25_benchmark  # noqa: E402

from winnow.corpus import load_corpus  # noqa: E402
from winnow.index import BM25Index, build_bm25_index  # noqa: E402
from winnow.llm import LLM  # noqa: E402
from winnow.llm.llamacpp import LlamaCppBackend  # noqa: E402
from winnow.llm.openai_format import choice_request  # noqa: E402
from winnow.models import resolve_model  # noqa: E402
from winnow.records import Trace  # noqa: E402
from winnow.stages import PointwiseTrueReranker  # noqa: E402

QUERIES = ("who painted the mona lisa", "what is the largest planet in the solar system",
           "who wrote on the origin of species", "what is the capital of australia",
           "when did the first world war begin", "who discovered penicillin")

console = Console()


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
            reranker.rank(candidates, Trace())
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
    bm25 = run_bm25_benchmark(corpus.passages)
    index_path = args.workdir / "wiki-vital-index"
    build_bm25_index(corpus.passages, index_path, source="wiki-vital", source_checksum="", overwrite=True,
                     progress=False)
    llm = rerank_vs_prefill(BM25Index.open(index_path), args.model, list(QUERIES[: args.queries]), args.n)
    if args.json:
        print(json.dumps({"bm25": bm25, "rerank": llm}, indent=2, default=str))
        return
    console.print(figures_table(bm25))
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
