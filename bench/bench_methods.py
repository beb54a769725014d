"""Retrievers and methods side by side on the 10,033 wiki-vital passages (not a test: it prints figures).

1. Retrievers: BM25, dense (all-MiniLM-L6-v2 int8, exact inner product) and hybrid (RRF) on the same
   2,000 known-item queries (a passage's title, or its first sentence): build/embedding time,
   queries/s, and how often the source passage comes first and within the top 10.
2. Methods: what one question costs with each method (vanilla, rankrag, mainrag, rrr, rankgpt) on
   the same questions, model and N: LLM calls and tokens per stage, seconds per question. This is the
   cost side of every comparison; quality is `winnow eval`'s job.

Usage: .venv/bin/python bench/bench_methods.py [--model qwen2.5-coder-0.5b] [--n 10] [--k 3]
       [--questions 3] [--skip-retrievers] [--skip-methods] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))
from bench_bm25 import best_of, make_queries  # noqa: E402

from winnow.corpus import load_corpus, source_checksum  # noqa: E402
from winnow.index import build_index, load_embedder, open_retriever  # noqa: E402
from winnow.llm import load_llm  # noqa: E402
from winnow.methods import build_method  # noqa: E402

METHOD_NAMES = ("vanilla", "rankrag", "mainrag", "rankgpt", "rrr")
QUESTIONS = ("what is the largest planet in the solar system", "who developed the theory of general relativity",
             "which program landed the first humans on the moon", "who painted the mona lisa",
             "what causes the seasons on earth")

console = Console(stderr=True)


def build_dense_index(out: Path) -> dict[str, Any]:
    corpus = load_corpus("wiki-vital")
    embedder = load_embedder()
    started = time.perf_counter()
    build_index(corpus.passages, out, source="wiki-vital", source_checksum=source_checksum(corpus.files),
                load_report=corpus.report.to_dict(), embedder=embedder, progress=True)
    seconds = time.perf_counter() - started
    manifest = json.loads((out / "manifest.json").read_text())
    return {"passages": len(corpus.passages), "build_seconds_with_embeddings": seconds,
            "embedding_seconds": manifest["dense"]["seconds"],
            "embedded_passages_per_second": manifest["dense"]["passages_per_second"],
            "embedder_threads": embedder.threads, "corpus": corpus}


def compare_retrievers(index_dir: Path, passages, n_queries: int, k: int = 10) -> list[dict[str, Any]]:
    pairs = make_queries(passages, n_queries)
    queries = [query for query, _ in pairs]
    rows = []
    for kind in ("bm25", "dense", "hybrid"):
        retriever = open_retriever(index_dir, kind)
        retriever.search_many(queries[:50], k=k)  # warm-up
        seconds = best_of(2, lambda: retriever.search_many(queries, k=k))
        results = retriever.search_many(queries, k=k)
        row: dict[str, Any] = {"retriever": kind, "queries_per_second": len(queries) / seconds}
        for label, parity in (("title", 0), ("first sentence", 1)):
            chosen = [(hits, source) for i, (hits, (_, source)) in enumerate(zip(results, pairs)) if i % 2 == parity]
            ranked = [[c.passage.id for c in hits] for hits, _ in chosen]
            row[f"{label} @1"] = sum(ids[:1] == [source] for ids, (_, source) in zip(ranked, chosen)) / len(chosen)
            row[f"{label} @10"] = sum(source in ids for ids, (_, source) in zip(ranked, chosen)) / len(chosen)
        rows.append(row)
        console.print(f"{kind}: {row['queries_per_second']:.0f} q/s")
    return rows


def method_costs(index_dir: Path, model: str, questions: list[str], n: int, k: int) -> list[dict[str, Any]]:
    """Every method on the same questions; no call cache, so each figure is a real model call."""
    index = open_retriever(index_dir, "bm25")
    llm = load_llm(model, cache=False)
    rows = []
    try:
        for name in METHOD_NAMES:
            method = build_method(name, index=index, llm=llm, n=n, k=k)
            per_stage: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
            seconds = 0.0
            answers = []
            for question in questions:
                started = time.perf_counter()
                answer = method.ask(question)
                seconds += time.perf_counter() - started
                answers.append(answer.text)
                for stage in answer.trace.stages:
                    usage = stage.usage
                    totals = per_stage[stage.name]
                    totals["calls"] += usage.calls
                    totals["prompt_tokens"] += usage.prompt_tokens
                    totals["completion_tokens"] += usage.completion_tokens
                    totals["seconds"] += usage.seconds
            count = len(questions)
            row = {"method": name, "questions": count, "seconds_per_question": seconds / count,
                   "calls_per_question": sum(s["calls"] for s in per_stage.values()) / count,
                   "prompt_tokens_per_question": sum(s["prompt_tokens"] for s in per_stage.values()) / count,
                   "completion_tokens_per_question": sum(s["completion_tokens"] for s in per_stage.values()) / count,
                   "stages": {stage: {key: value / count for key, value in totals.items()}
                              for stage, totals in per_stage.items() if totals["calls"]},
                   "answers": answers}
            rows.append(row)
            console.print(f"{name}: {row['seconds_per_question']:.1f} s/question, "
                          f"{row['calls_per_question']:.1f} calls/question")
    finally:
        llm.close()
    return rows


def retriever_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="Retrievers on 2,000 known-item queries (k=10)", title_justify="left")
    for column in rows[0]:
        table.add_column(column, justify="left" if column == "retriever" else "right")
    for row in rows:
        table.add_row(*(f"{value:.3f}" if isinstance(value, float) and value < 10 else
                        f"{value:,.0f}" if isinstance(value, float) else str(value) for value in row.values()))
    return table


def cost_table(rows: list[dict[str, Any]], model: str, n: int, k: int) -> Table:
    table = Table(title=f"Cost per question, {model}, N={n}, k={k}, call cache off", title_justify="left")
    for column in ("method", "s/question", "calls", "prompt tok", "completion tok", "calls per stage"):
        table.add_column(column, justify="left" if column in ("method", "calls per stage") else "right")
    for row in rows:
        stages = ", ".join(f"{stage} {figures['calls']:.1f}" for stage, figures in row["stages"].items())
        table.add_row(row["method"], f"{row['seconds_per_question']:.1f}", f"{row['calls_per_question']:.1f}",
                      f"{row['prompt_tokens_per_question']:,.0f}", f"{row['completion_tokens_per_question']:,.0f}",
                      stages)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--n", type=int, default=10)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--questions", type=int, default=3)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--skip-retrievers", action="store_true")
    parser.add_argument("--skip-methods", action="store_true")
    parser.add_argument("--json", type=Path, help="Also write every figure to this JSON file.")
    args = parser.parse_args()

    out = Console()
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-methods-") as temp:
        index_dir = Path(temp) / "wiki-vital"
        build = build_dense_index(index_dir)
        corpus = build.pop("corpus")
        figures["build"] = build
        out.print(f"embedded {build['passages']:,} passages in {build['embedding_seconds']:.1f} s "
                  f"({build['embedded_passages_per_second']:.0f} passages/s, {build['embedder_threads']} threads); "
                  f"whole build {build['build_seconds_with_embeddings']:.1f} s")
        if not args.skip_retrievers:
            figures["retrievers"] = compare_retrievers(index_dir, corpus.passages, args.queries)
            out.print(retriever_table(figures["retrievers"]))
        if not args.skip_methods:
            questions = list(QUESTIONS[:args.questions])
            figures["methods"] = method_costs(index_dir, args.model, questions, args.n, args.k)
            out.print(cost_table(figures["methods"], args.model, args.n, args.k))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
