"""Adaptive depth: the questions it skips and the LLM calls it saves, and what it does to the answers.

Two parts, both printed as Markdown:

- ``--index I --queries Q --n N --threshold T ...``: from the first stage alone (no LLM), the share of
  questions whose margin reaches each threshold and the calls a pointwise reranker over N (RankRAG:
  one P("True") per passage and one answer) then makes against the full method, on the first
  ``--limit`` questions of the seeded order ``winnow eval`` uses.
- ``--full RUN --adaptive RUN ...``: run folders of ``winnow eval`` on the same questions; each
  adaptive run against the full method: questions skipped, LLM calls (made or served from the call
  cache: what the method asks for), accuracy and EM with the paired interval and sign test of
  :mod:`winnow.evaluation.paired`.

    python bench/bench_adaptive_depth.py --index wv-index --queries test.jsonl --n 10 --limit 200 \\
        --threshold 0.05 --threshold 0.07
    python bench/bench_adaptive_depth.py --full runs/full --adaptive runs/ad0.05 --adaptive runs/ad0.07

A question that is not skipped gets the full method's answer by construction (the same calls, served
from the call cache), so the change in answers is decided by the skipped questions alone. On a slow
machine, ``--skipped-out DIR`` writes each threshold's skipped questions as ``skipped-T.jsonl``; run
the full and adaptive methods on that file only and give ``--out-of 200``: each unskipped question
then enters the paired interval as a difference of 0, which is what it is.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from winnow.datasets import read_qa_jsonl
from winnow.evaluation.paired import paired_difference
from winnow.evaluation.runfolder import RunFolder
from winnow.evaluation.runner import select_questions
from winnow.index import open_retriever
from winnow.stages.adaptive_depth import first_stage_margin


def first_stage_table(index: Path, queries: Path, n: int, limit: int, seed: int, thresholds: list[float],
                      skipped_out: Path | None = None) -> None:
    retriever = open_retriever(index)
    chosen = select_questions(read_qa_jsonl(queries), limit=limit, seed=seed)
    lists = [[c.score for c in retriever.search(item.question, k=n)] for item in chosen]
    full = sum(len(scores) + 1 for scores in lists)
    print(f"{len(chosen)} questions, N={n}: the full method makes {full} calls ({full / len(chosen):.2f} a question)\n")
    print("| threshold | questions skipped | calls | fewer calls |\n|---:|---:|---:|---:|")
    for threshold in thresholds:
        sure = [first_stage_margin(scores) >= threshold for scores in lists]
        calls = sum(1 if s else len(scores) + 1 for s, scores in zip(sure, lists, strict=True))
        print(f"| {threshold:g} | {sum(sure)} ({100 * sum(sure) / len(chosen):.1f} %) | {calls} "
              f"| {100 * (1 - calls / full):.1f} % |")
        if skipped_out is not None:
            skipped_out.mkdir(parents=True, exist_ok=True)
            lines = [json.dumps(item.to_dict()) + "\n" for item, s in zip(chosen, sure, strict=True) if s]
            (skipped_out / f"skipped-{threshold:g}.jsonl").write_text("".join(lines))


def run_table(full: Path, adaptive: list[Path], out_of: int | None = None) -> None:
    """``out_of``: the runs hold only the skipped questions of that many (see the module notes); the
    unskipped ones enter the paired figures as zero differences."""
    reference = RunFolder(full).read_answers()
    print("| run | questions | skipped | LLM calls/q | fewer calls | answer in the list read | Acc. | Δ Acc. against "
          "full [95% CI], wins/losses, p | EM | Δ EM [95% CI], p |\n|---|---:|---:|---:|---:|---:|---:|---|---:|---|")
    for path in [full, *adaptive]:
        records = RunFolder(path).read_answers()
        ids = [qid for qid in records if qid in reference]
        if len(ids) != len(records):
            raise SystemExit(f"{path} answered questions {full} did not; run both with the same --seed and --limit")
        calls = sum(records[q].usage.calls + records[q].usage.cache_hits for q in ids)
        full_calls = sum(reference[q].usage.calls + reference[q].usage.cache_hits for q in ids)
        skipped = sum(1 for q in ids for s in records[q].stages if s.kind == "adaptive-depth" and s.detail("skipped"))
        cells = [path.name, str(len(ids)), str(skipped), f"{calls / len(ids):.2f}",
                 f"{100 * (1 - calls / full_calls):.1f} %",
                 f"{100 * sum(1 for q in ids if records[q].final.answer_ranks) / len(ids):.1f} %"]
        for metric in ("accuracy", "em"):
            mine = [records[q].scores.of(metric) * 100 for q in ids]
            theirs = [reference[q].scores.of(metric) * 100 for q in ids]
            cells.append(f"{sum(mine) / len(ids):.1f}")
            if path == full:
                cells.append("–")
                continue
            padding = [0.0] * ((out_of or len(ids)) - len(ids))
            d = paired_difference(theirs + padding, mine + padding)
            extra = f", {d.wins}/{d.losses}" if metric == "accuracy" else ""
            cells.append(f"{d.mean_difference:+.1f} [{d.low:+.1f}, {d.high:+.1f}]{extra}, p {d.p_value:.2f}")
        print("| " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", type=Path)
    parser.add_argument("--queries", type=Path)
    parser.add_argument("--n", type=int, default=10)
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threshold", type=float, action="append", default=[])
    parser.add_argument("--full", type=Path)
    parser.add_argument("--adaptive", type=Path, action="append", default=[])
    parser.add_argument("--skipped-out", type=Path, help="write each threshold's skipped questions here")
    parser.add_argument("--out-of", type=int, help="the runs hold only the skipped questions of this many")
    args = parser.parse_args()
    if args.index and args.queries:
        first_stage_table(args.index, args.queries, args.n, args.limit, args.seed, args.threshold or [0.05],
                          args.skipped_out)
    if args.full:
        run_table(args.full, args.adaptive, args.out_of)


if __name__ == "__main__":
    main()
