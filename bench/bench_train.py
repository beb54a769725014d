"""RankRAG instruction tuning on this CPU: does a tuned SmolLM2-135M rank better than the base model?

Steps (each reused when already done; the training resumes from its last checkpoint):

1. BM25 index of the 10,033 Wikipedia vital-article summaries (``winnow.build_index("wiki-vital")``).
2. The real Stage-II blend (RankRAG §4.2, Appendix B ratios): NQ-open and TriviaQA **dev**
   questions mined against that index (gold = best-ranked summary holding an answer, BM25 hard
   negatives), as context ranking, retrieval-augmented QA, retrieval-augmented ranking and
   context-rich QA; contamination checked against every QA test set and wiki-vital QA.
3. LoRA fine-tuning of SmolLM2-135M-Instruct (the GGUF, dequantised) on it: ``--steps`` optimizer
   steps of ``--batch-size`` x ``--grad-accum`` examples, one CPU thread by default.
4. Held-out evaluation on wiki-vital QA **dev** questions (built from NQ-open and TriviaQA *test*
   questions, never trained on): every question's BM25 top ``--depth`` plus its judged-relevant
   articles are scored by P("True") with the context-ranking prompt (Appendix D.1, as the rankrag
   method does), by the base and by the tuned model through the same transformers backend.
   Reported: AUC of P("True") (judged-relevant articles vs retrieved passages without an answer, and
   answer-holding vs answer-free retrieved passages), answer Recall@1/@5 of the BM25 top ``--depth``
   reranked by P("True") against BM25's own order, with paired bootstrap 95% intervals.

Usage: .venv/bin/python bench/bench_train.py [--steps 16] [--eval-questions 60] [--record]
``--record`` rewrites the "RankRAG instruction tuning" section of docs/results.md with the figures.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from rich.console import Console
from rich.table import Table

from winnow.datasets import read_qa_jsonl, read_qrels
from winnow.evaluation.answers import AnswerMatcher
from winnow.paths import cache_root
from winnow.records import Candidate, CandidateList, Query, StageScore, Trace

console = Console(stderr=True)
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results.md"
SECTION = "## RankRAG instruction tuning"

# The real blend. Our NQ/TriviaQA dev questions stand in for the datasets of the same role in
# Appendix B: SQuAD and WebQuestions (retrieval-augmented QA 0.09 each, retrieval-augmented ranking
# 0.02 each), MS MARCO (context ranking 0.15, split over the two sources) and one reading-comprehension
# set (context-rich QA 0.09, split likewise). No conversational or Stage-I SFT data installs here.
BLEND = """# RankRAG Stage-II blend from data that installs here (written by bench/bench_train.py).
seed = 0

[[component]]
name = "nq-ranking"
kind = "ranking"
qa = "nq-dev"
index = "{index}"
ratio = 0.075

[[component]]
name = "triviaqa-ranking"
kind = "ranking"
qa = "triviaqa-dev"
index = "{index}"
ratio = 0.075

[[component]]
name = "nq-rag-qa"
kind = "rag_qa"
qa = "nq-dev"
index = "{index}"
ratio = "squad_rag_qa"

[[component]]
name = "triviaqa-rag-qa"
kind = "rag_qa"
qa = "triviaqa-dev"
index = "{index}"
ratio = "webquestions_rag_qa"

[[component]]
name = "nq-rag-ranking"
kind = "rag_ranking"
qa = "nq-dev"
index = "{index}"
ratio = "squad_rag_ranking"

[[component]]
name = "triviaqa-rag-ranking"
kind = "rag_ranking"
qa = "triviaqa-dev"
index = "{index}"
ratio = "webquestions_rag_ranking"

[[component]]
name = "nq-context-qa"
kind = "context_qa"
qa = "nq-dev"
index = "{index}"
ratio = 0.045

[[component]]
name = "triviaqa-context-qa"
kind = "context_qa"
qa = "triviaqa-dev"
index = "{index}"
ratio = 0.045
"""


def step(message: str) -> None:
    console.print(f"[bold]»[/] {message}", highlight=False)


def ensure_index(workdir: Path):
    import winnow

    folder = workdir / "wiki-index"
    if (folder / "manifest.json").is_file():
        return winnow.open_index(folder)
    step("indexing the wiki-vital summaries")
    return winnow.build_index("wiki-vital", folder, progress=False)


def ensure_blend(workdir: Path) -> dict[str, Any]:
    from winnow.training.blend import build_blend

    config = workdir / "blend.toml"
    text = BLEND.format(index=workdir / "wiki-index")
    stats_file = workdir / "blend" / "stats.json"
    if stats_file.is_file() and config.is_file() and config.read_text() == text:
        return json.loads(stats_file.read_text())
    config.write_text(text)
    step("building the blend (mining NQ and TriviaQA dev questions against the index)")
    return build_blend(config, workdir / "blend", overwrite=True).stats


def ensure_benchmark() -> Path:
    folder = cache_root() / "wiki-vital-qa"
    if not (folder / "dev.jsonl").is_file():
        from winnow.datasets.wiki_vital_qa import build_wiki_vital_qa

        step("building wiki-vital QA (NQ-open and TriviaQA test questions)")
        build_wiki_vital_qa(folder)
    return folder


def train(workdir: Path, args: argparse.Namespace):
    from winnow.training.sft import SFTSettings, train_sft

    settings = SFTSettings(base="smollm2-135m", data=str(workdir / "blend"), out=str(workdir / "run"), lora=True,
                           max_steps=args.steps, batch_size=args.batch_size, grad_accum=args.grad_accum, lr=args.lr,
                           warmup_steps=args.warmup, save_steps=args.save_steps, threads=args.threads, seed=0)
    step(f"fine-tuning smollm2-135m: {args.steps} steps x {args.batch_size * args.grad_accum} examples, "
         f"LoRA r=16, lr {args.lr}, {args.threads} thread(s)")

    def on_step(done: int, total: int, logs: dict) -> None:
        if "loss" in logs:
            console.print(f"  step {done}/{total}: loss {logs['loss']:.4f}", highlight=False)

    return train_sft(settings, on_step=on_step)


def eval_questions(benchmark: Path, count: int, seed: int) -> tuple[list[Any], dict[str, dict[str, int]]]:
    questions = read_qa_jsonl(benchmark / "dev.jsonl")
    qrels = read_qrels(benchmark / "qrels.dev.txt")
    chosen = sorted(random.Random(seed).sample(range(len(questions)), min(count, len(questions))))
    return [questions[i] for i in chosen], qrels


def candidate_lists(index, questions: Sequence[Any], qrels, depth: int) -> list[tuple[CandidateList, int]]:
    """BM25 top ``depth`` per question, then its judged articles not already there (scored for the
    AUC only); the int is how many of the list are BM25's."""
    lists = []
    for item, hits in zip(questions, index.search_many([q.question for q in questions], k=depth)):
        retrieved = [c.passage.id for c in hits]
        extra = [index.get(pid) for pid in qrels.get(item.id, {}) if pid not in retrieved]
        candidates = list(hits) + [Candidate(p, [StageScore("judged", 0.0, len(hits) + i + 1)])
                                   for i, p in enumerate(extra)]
        lists.append((CandidateList(Query(item.question, item.id), candidates), len(hits)))
    return lists


def score(model: str, lists, workdir: Path, threads: int, label: str) -> tuple[list[dict[str, float]], float]:
    """P("True") per (question, passage) with the rankrag method's own reranker stage."""
    import winnow
    from winnow.stages import PointwiseTrueReranker

    llm = winnow.load_llm(model, backend="transformers", cache=workdir / "calls.sqlite", threads=threads)
    reranker = PointwiseTrueReranker(llm)
    total = sum(len(c) for c, _ in lists)
    started, done, out = time.perf_counter(), 0, []
    try:
        for candidates, _ in lists:
            ranked = reranker.run(candidates, Trace())
            out.append({c.passage.id: c.score_of("rerank") for c in ranked})
            done += len(candidates)
            console.print(f"  {label}: {done}/{total} pairs scored ({time.perf_counter() - started:.0f} s)",
                          highlight=False, end="\r")
    finally:
        llm.close()
    console.print()
    return out, time.perf_counter() - started


def auc(positives: Sequence[float], negatives: Sequence[float]) -> float:
    """P(a random positive scores above a random negative), ties counting half (Mann-Whitney U)."""
    if not positives or not negatives:
        return float("nan")
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


def per_question(questions, qrels, lists, scores) -> list[dict[str, Any]]:
    """Labels and ranks per question, for the pooled AUCs and the recall figures."""
    rows = []
    for item, (candidates, depth), p_true in zip(questions, lists, scores):
        holds = AnswerMatcher(item.golden_answers, regex=item.is_regex)
        retrieved = list(candidates)[:depth]
        answer = [holds(c.passage.text) for c in retrieved]
        judged = set(qrels.get(item.id, {}))
        order = sorted(range(depth), key=lambda i: (-p_true[retrieved[i].passage.id], i))
        rows.append({
            "judged": [p_true[pid] for pid in judged if pid in p_true],
            "answer_free": [p_true[c.passage.id] for c, a in zip(retrieved, answer) if not a],
            "answer": [p_true[c.passage.id] for c, a in zip(retrieved, answer) if a],
            "bm25_ranks": [i + 1 for i, a in enumerate(answer) if a],
            "reranked_ranks": [rank + 1 for rank, i in enumerate(order) if answer[i]],
        })
    return rows


def metrics(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    def pooled(key_pos: str, key_neg: str) -> float:
        return auc([s for r in rows for s in r[key_pos]], [s for r in rows for s in r[key_neg]])

    def recall(key: str, k: int) -> float:
        return sum(any(rank <= k for rank in r[key]) for r in rows) / len(rows)

    judged = [s for r in rows for s in r["judged"]]
    free = [s for r in rows for s in r["answer_free"]]
    return {"auc_judged_vs_answer_free": pooled("judged", "answer_free"),
            "auc_answer_vs_answer_free": pooled("answer", "answer_free"),
            "mean_p_true_judged": sum(judged) / len(judged), "mean_p_true_answer_free": sum(free) / len(free),
            "recall@1": recall("reranked_ranks", 1), "recall@5": recall("reranked_ranks", 5),
            "bm25_recall@1": recall("bm25_ranks", 1), "bm25_recall@5": recall("bm25_ranks", 5)}


def bootstrap(base_rows, tuned_rows, keys: Sequence[str], rounds: int = 1000, seed: int = 0) -> dict[str, list[float]]:
    """Paired bootstrap over questions: 95% interval of tuned minus base for each metric."""
    rng = random.Random(seed)
    n = len(base_rows)
    diffs: dict[str, list[float]] = {key: [] for key in keys}
    for _ in range(rounds):
        sample = [rng.randrange(n) for _ in range(n)]
        base = metrics([base_rows[i] for i in sample])
        tuned = metrics([tuned_rows[i] for i in sample])
        for key in keys:
            diffs[key].append(tuned[key] - base[key])
    return {key: [sorted(v)[int(0.025 * rounds)], sorted(v)[int(0.975 * rounds) - 1]] for key, v in diffs.items()}


def render(results: dict[str, Any]) -> str:
    """The docs/results.md section."""
    base, tuned, ci = results["base"], results["tuned"], results["interval_95"]
    blend, training = results["blend"], results["training"]
    lines = [
        SECTION, "",
        f"`bench/bench_train.py` ({results['date']}, {results['threads']} CPU thread(s)). SmolLM2-135M-Instruct "
        "(the Q4_1 GGUF, dequantised to float32) fine-tuned with a LoRA adapter (r=16, all linear layers) on the "
        "real Stage-II blend, then compared with the untuned model through the same transformers backend and the "
        "rankrag method's own P(\"True\") reranker (Appendix D.1 prompt).", "",
        f"- **Blend**: {blend['size']:,} examples from NQ-open and TriviaQA **dev** questions mined against the "
        f"wiki-vital BM25 index ({blend['questions_with_gold']}); shares "
        + ", ".join(f"{kind} {share:.0%}" for kind, share in blend["shares_by_kind"].items())
        + f"; {blend['contaminated']} examples dropped by the contamination check against "
        f"{blend['eval_questions']:,} evaluation questions (every QA test set and wiki-vital QA).",
        f"- **Training**: {training['steps']} optimizer steps x {training['examples_per_step']} examples = "
        f"{training['examples_seen']} examples seen ({training['share_of_blend']:.1%} of the blend), lr "
        f"{training['lr']}, loss {training['first_loss']:.3f} → {training['last_loss']:.3f} (mean of the first / "
        f"last five steps: {training['first5']:.3f} → {training['last5']:.3f}), {training['minutes']:.1f} min.",
        f"- **Held-out evaluation**: {results['questions']} wiki-vital QA **dev** questions (from NQ-open and "
        f"TriviaQA *test*), BM25 top {results['depth']} each plus their judged articles: {results['pairs']:,} "
        f"pairs, {results['judged']} judged-relevant, {results['answer_free']:,} retrieved without an answer.",
        "",
        "| | base | tuned | tuned − base (95% CI) |",
        "|---|---:|---:|---:|",
    ]
    names = {"auc_judged_vs_answer_free": "AUC of P(True): judged-relevant vs answer-free",
             "auc_answer_vs_answer_free": "AUC of P(True): answer-holding vs answer-free (retrieved)",
             "mean_p_true_judged": "mean P(True), judged-relevant",
             "mean_p_true_answer_free": "mean P(True), answer-free",
             "recall@1": f"answer Recall@1, BM25 top {results['depth']} reranked",
             "recall@5": f"answer Recall@5, BM25 top {results['depth']} reranked"}
    for key, name in names.items():
        interval = f" ({ci[key][0]:+.3f}, {ci[key][1]:+.3f})" if key in ci else ""
        lines.append(f"| {name} | {base[key]:.3f} | {tuned[key]:.3f} | {tuned[key] - base[key]:+.3f}{interval} |")
    lines += [f"| answer Recall@1 / @5, BM25 alone | {base['bm25_recall@1']:.3f} / {base['bm25_recall@5']:.3f} | | |",
              "", results["verdict"], "",
              f"Scoring took {results['seconds']['base']:.0f} s (base) and {results['seconds']['tuned']:.0f} s (tuned) "
              f"for {results['pairs']:,} pairs each. Reproduce: `.venv/bin/python bench/bench_train.py --record` "
              "(the blend, the training run and the scores are reused when present; the run resumes from its "
              "checkpoint).", ""]
    return "\n".join(lines)


def verdict(base: dict[str, float], tuned: dict[str, float], ci: dict[str, list[float]]) -> str:
    parts = []
    for key, what in (("auc_judged_vs_answer_free", "separates relevant from irrelevant passages"),
                      ("recall@5", "answer Recall@5 after reranking")):
        low, high = ci[key]
        if low > 0:
            parts.append(f"the tuned model {what} better than the base model (the interval excludes zero)")
        elif high < 0:
            parts.append(f"the tuned model is worse on {what} (the interval excludes zero)")
        else:
            parts.append(f"the difference in {what} is within noise at this sample size")
    beats = tuned["recall@5"] - tuned["bm25_recall@5"]
    parts.append(f"against BM25 alone the tuned reranker's Recall@5 differs by {beats:+.3f}")
    return "Reading: " + "; ".join(parts) + "."


def record(section: str) -> None:
    """Replace (or append) the section in docs/results.md, leaving the rest of the file alone."""
    text = RESULTS.read_text(encoding="utf-8") if RESULTS.is_file() else "# Results\n"
    if SECTION in text:
        start = text.index(SECTION)
        following = text.find("\n## ", start + len(SECTION))
        text = text[:start] + section + ("\n" + text[following + 1:] if following != -1 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    temp = RESULTS.with_name(f".{RESULTS.name}.tmp")
    temp.write_text(text.rstrip("\n") + "\n", encoding="utf-8")
    temp.replace(RESULTS)


def blend_summary(stats: dict[str, Any]) -> dict[str, Any]:
    shares: dict[str, float] = {}
    for component in stats["components"].values():
        shares[component["kind"]] = shares.get(component["kind"], 0.0) + component["share"]
    by_source: dict[str, tuple[int, int]] = {}
    for component in stats["components"].values():
        skipped = sum(v for k, v in component["skipped"].items() if k.startswith("no passage holding"))
        by_source[component["qa"]] = (component["source_records"] - skipped, component["source_records"])
    gold = ", ".join(f"{source}: {kept:,} of {total:,} questions have an answer-holding summary in the BM25 top 20"
                     for source, (kept, total) in by_source.items())
    return {"size": stats["size"], "shares_by_kind": shares, "questions_with_gold": gold,
            "contaminated": stats["contamination"]["dropped_total"],
            "eval_questions": sum(stats["contamination"]["eval_sets"].values())}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=cache_root() / "train-bench")
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--grad-accum", type=int, default=8)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--save-steps", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--eval-questions", type=int, default=60)
    parser.add_argument("--depth", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--record", action="store_true", help="write the figures into docs/results.md")
    args = parser.parse_args(argv)
    workdir = args.workdir.expanduser()
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    index = ensure_index(workdir)
    stats = ensure_blend(workdir)
    report = train(workdir, args)
    benchmark = ensure_benchmark()
    questions, qrels = eval_questions(benchmark, args.eval_questions, args.seed)
    lists = candidate_lists(index, questions, qrels, args.depth)
    step(f"scoring {sum(len(c) for c, _ in lists):,} (question, passage) pairs with the base and the tuned model")
    base_scores, base_seconds = score("smollm2-135m", lists, workdir, args.threads, "base")
    tuned_scores, tuned_seconds = score(str(workdir / "run"), lists, workdir, args.threads, "tuned")
    base_rows = per_question(questions, qrels, lists, base_scores)
    tuned_rows = per_question(questions, qrels, lists, tuned_scores)
    base, tuned = metrics(base_rows), metrics(tuned_rows)
    ci = bootstrap(base_rows, tuned_rows, ["auc_judged_vs_answer_free", "auc_answer_vs_answer_free",
                                           "recall@1", "recall@5"])
    curve = [float(line.split(",")[2]) for line in (workdir / "run" / "curve.csv").read_text().splitlines()[1:]]
    training = {"steps": report.steps, "examples_per_step": args.batch_size * args.grad_accum,
                "examples_seen": report.steps * args.batch_size * args.grad_accum,
                "share_of_blend": report.steps * args.batch_size * args.grad_accum / stats["size"], "lr": args.lr,
                "first_loss": curve[0], "last_loss": curve[-1], "first5": sum(curve[:5]) / len(curve[:5]),
                "last5": sum(curve[-5:]) / len(curve[-5:]),
                "minutes": float((workdir / "run" / "curve.csv").read_text().splitlines()[-1].split(",")[5]) / 60}
    results = {"date": time.strftime("%Y-%m-%d"), "threads": args.threads, "blend": blend_summary(stats),
               "training": training, "questions": len(questions), "depth": args.depth,
               "pairs": sum(len(c) for c, _ in lists), "judged": sum(len(r["judged"]) for r in base_rows),
               "answer_free": sum(len(r["answer_free"]) for r in base_rows),
               "base": base, "tuned": tuned, "interval_95": ci, "seconds": {"base": base_seconds, "tuned": tuned_seconds},
               "verdict": verdict(base, tuned, ci)}
    (workdir / "results.json").write_text(json.dumps(results, indent=2) + "\n")

    table = Table(title=f"Base vs tuned SmolLM2-135M on {len(questions)} wiki-vital QA dev questions", title_justify="left")
    for column in ("metric", "base", "tuned", "tuned − base (95% CI)"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for key in base:
        interval = f" ({ci[key][0]:+.3f}, {ci[key][1]:+.3f})" if key in ci else ""
        table.add_row(key, f"{base[key]:.3f}", f"{tuned[key]:.3f}", f"{tuned[key] - base[key]:+.3f}{interval}")
    Console().print(table)
    console.print(results["verdict"], highlight=False)
    if args.record:
        record(render(results))
        console.print(f"recorded in {RESULTS}")
    console.print(f"done in {(time.perf_counter() - started) / 60:.1f} min; results in {workdir / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
