"""`make demo`: index the Wikipedia vital-article summaries and answer sample questions with plain
RAG and with RankRAG, showing how reranking changed the evidence.

Model and N are chosen to finish within 10 minutes on a 2-core CPU (see README, "The demo").
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .corpus import load_corpus, source_checksum
from .errors import IndexLoadError, WinnowError
from .index import BM25Index, build_bm25_index
from .llm import load_llm
from .methods import build_method
from .records import Answer, Usage
from .report import snippet, summary_line, usage_table

DEMO_MODEL = "qwen2.5-coder-1.5b"  # the one local model whose relevance judgements beat BM25
DEMO_N = 10
DEMO_K = 3
QUESTIONS = (
    "who developed the theory of general relativity",
    "who was the first person to walk on the moon",
    "what language is spoken in brazil",
)

console = Console()


def ensure_index(workdir: Path) -> BM25Index:
    """The wiki-vital index in ``workdir``, built on first use and rebuilt if the corpus changed."""
    path = workdir / "wiki-vital-index"
    corpus = load_corpus("wiki-vital")
    checksum = source_checksum(corpus.files)
    try:
        index = BM25Index.open(path)
        if index.manifest.get("source_checksum") == checksum:
            console.print(f"using the index in {path} ({len(index)} passages)")
            return index
        console.print("the corpus changed since the index was built: rebuilding")
    except IndexLoadError:
        pass
    console.print(corpus.report.summary())
    started = time.perf_counter()
    build_bm25_index(corpus.passages, path, source="wiki-vital", source_checksum=checksum,
                     load_report=corpus.report.to_dict(), overwrite=True, progress=True)
    console.print(f"indexed {len(corpus.passages)} passages in {time.perf_counter() - started:.1f} s → {path}")
    return BM25Index.open(path)


def evidence_table(vanilla: Answer, rankrag: Answer) -> Table:
    table = Table(title="How reranking changed the evidence", title_justify="left", expand=True)
    table.add_column("#", justify="right")
    table.add_column(f"vanilla: BM25 top {len(vanilla.passages)}", ratio=1)
    table.add_column(f"rankrag: top {len(rankrag.passages)} after P(True) reranking of BM25 top "
                     f"{rankrag.settings['n']}", ratio=1)
    plain_ids = {c.passage.id for c in vanilla.passages}
    for i in range(max(len(vanilla.passages), len(rankrag.passages))):
        left = Text()
        if i < len(vanilla.passages):
            c = vanilla.passages.candidates[i]
            left.append(c.passage.title or c.passage.id, style="bold")
            left.append(f"  bm25 {c.score:.2f}\n{snippet(c.passage.text, 70)}")
        right = Text()
        if i < len(rankrag.passages):
            c = rankrag.passages.candidates[i]
            moved = c.passage.id not in plain_ids
            right.append(c.passage.title or c.passage.id, style="bold green" if moved else "bold")
            right.append(f"  BM25 rank {c.rank_of('bm25')} → {i + 1}, P(True) {c.score:.2f}"
                         + ("  (new)" if moved else "") + f"\n{snippet(c.passage.text, 70)}")
        table.add_row(str(i + 1), left, right)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workdir", type=Path, default=Path.home() / ".cache" / "winnow" / "demo")
    parser.add_argument("--model", default=DEMO_MODEL)
    parser.add_argument("--n", type=int, default=DEMO_N)
    parser.add_argument("--k", type=int, default=DEMO_K)
    parser.add_argument("--no-cache", action="store_true", help="bypass the LLM call cache")
    parser.add_argument("questions", nargs="*", default=list(QUESTIONS))
    args = parser.parse_args()
    started = time.perf_counter()
    try:
        index = ensure_index(args.workdir)
        with console.status(f"loading {args.model}"):
            llm = load_llm(args.model, cache=not args.no_cache)
        vanilla = build_method("vanilla", index=index, llm=llm, k=args.k)
        rankrag = build_method("rankrag", index=index, llm=llm, n=args.n, k=args.k)
        total = Usage()
        stages = []
        for question in args.questions:
            console.rule(f"[b]{question}")
            with console.status("vanilla RAG…"):
                plain = vanilla.ask(question)
            with console.status(f"RankRAG: scoring {args.n} passages, then answering…"):
                ranked = rankrag.ask(question)
            console.print(f"[b]vanilla:[/b] {plain.text}\n[b]rankrag:[/b] {ranked.text}")
            console.print(evidence_table(plain, ranked))
            for answer in (plain, ranked):
                total.add(answer.usage)
                stages.extend(answer.trace.stages)
        llm.close()
    except WinnowError as exc:
        console.print(f"[bold red]error:[/] {exc}")
        raise SystemExit(2) from exc
    console.rule("summary")
    console.print(f"{len(args.questions)} questions × 2 methods with {args.model}, N={args.n}, k={args.k}")
    console.print(usage_table(stages, title="LLM usage, all questions"))
    console.print(summary_line(total, time.perf_counter() - started))


if __name__ == "__main__":
    main()
