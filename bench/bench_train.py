"""RankRAG instruction tuning on this CPU: does a tuned SmolLM2-135M rank better than the base model?

Steps (each reused when already done; a training run resumes from its last checkpoint):

1. BM25 index of the 10,033 Wikipedia vital-article summaries (``winnow.build_index("wiki-vital")``).
2. The real Stage-II blend (RankRAG §4.2, Appendix B ratios): NQ-open and TriviaQA **dev**
   questions mined against that index (gold = best-ranked summary holding an answer, BM25 hard
   negatives), as context ranking, retrieval-augmented QA, retrieval-augmented ranking and
   context-rich QA; contamination checked against every QA test set and wiki-vital QA.
   ``--variant ranking`` keeps only its context-ranking pairs (an ablation, not the paper's blend).
3. LoRA fine-tuning of SmolLM2-135M-Instruct (the GGUF, dequantised) on it, one CPU thread, for
   the number of steps that fits in about 20 minutes (``--steps`` overrides).
4. Held-out evaluation on wiki-vital QA **dev** questions (built from NQ-open and TriviaQA *test*
   questions, never trained on): every question's BM25 top ``--depth`` plus its judged-relevant
   articles are scored by P("True") with the context-ranking prompt (Appendix D.1, as the rankrag
   method does), by the base and the tuned model through the same transformers backend.
   Reported: AUC of P("True") (judged-relevant articles vs retrieved passages without an answer, and
   answer-holding vs answer-free retrieved passages), answer Recall@1/@5 of the BM25 top ``--depth``
   reranked by P("True") against BM25's own order, with paired bootstrap 95% intervals.

Usage: .venv/bin/python bench/bench_train.py [--variant real|ranking|all] [--eval-questions 60] [--record]
About 35 minutes for one variant (20 training, 7 scoring per model; the base model's scores are
cached). ``--record`` rewrites the "RankRAG instruction tuning" section of docs/results.md with every
variant measured on the same evaluation.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from rich.console import Console
from rich.table import Table

from winnow.datasets import read_qa_jsonl, read_qrels
from winnow.answers import AnswerMatcher
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
COMPONENTS = [  # name, kind, questions, ratio (a number or an Appendix B dataset)
    ("nq-ranking", "ranking", "nq-dev", 0.075),
    ("triviaqa-ranking", "ranking", "triviaqa-dev", 0.075),
    ("nq-rag-qa", "rag_qa", "nq-dev", "squad_rag_qa"),
    ("triviaqa-rag-qa", "rag_qa", "triviaqa-dev", "webquestions_rag_qa"),
    ("nq-rag-ranking", "rag_ranking", "nq-dev", "squad_rag_ranking"),
    ("triviaqa-rag-ranking", "rag_ranking", "triviaqa-dev", "webquestions_rag_ranking"),
    ("nq-context-qa", "context_qa", "nq-dev", 0.045),
    ("triviaqa-context-qa", "context_qa", "triviaqa-dev", 0.045),
]


@dataclass(frozen=True)
class Variant:
    kinds: frozenset[str] | None  # the components' kinds kept; None: all
    steps: int  # optimizer steps that fit in about 20 minutes on one thread
    label: str


VARIANTS = {
    "real": Variant(None, 16, "real blend"),
    # The same ranking pairs alone: short examples (one passage), so the same 20 minutes see about
    # 2.5x as many examples, all of them ranking. Not the paper's blend: an ablation that asks whether
    # this model learns to rank at all on this budget.
    "ranking": Variant(frozenset({"ranking"}), 40, "ranking pairs only"),
}


def blend_toml(index: Path, variant: Variant) -> str:
    lines = ["# RankRAG Stage-II blend from data that installs here (written by bench/bench_train.py).", "seed = 0"]
    for name, kind, questions, ratio in COMPONENTS:
        if variant.kinds is None or kind in variant.kinds:
            lines += ["", "[[component]]", f'name = "{name}"', f'kind = "{kind}"', f'qa = "{questions}"',
                      f'index = "{index}"', f"ratio = {json.dumps(ratio)}"]
    return "\n".join(lines) + "\n"


def step(message: str) -> None:
    console.print(f"[bold]»[/] {message}", highlight=False)


def ensure_index(workdir: Path):
    import winnow

    folder = workdir / "wiki-index"
    if (folder / "manifest.json").is_file():
        return winnow.open_index(folder)
    step("indexing the wiki-vital summaries")
    return winnow.build_index("wiki-vital", folder, progress=False)


def ensure_blend(workdir: Path, name: str) -> dict[str, Any]:
    from winnow.training.blend import build_blend

    config = workdir / f"blend-{name}.toml"
    text = blend_toml(workdir / "wiki-index", VARIANTS[name])
    stats_file = workdir / f"blend-{name}" / "stats.json"
    if stats_file.is_file() and config.is_file() and config.read_text() == text:
        return json.loads(stats_file.read_text())
    config.write_text(text)
    step(f"building the {VARIANTS[name].label} (mining NQ and TriviaQA dev questions against the index)")
    return build_blend(config, workdir / f"blend-{name}", overwrite=True).stats


def ensure_benchmark() -> Path:
    folder = cache_root() / "wiki-vital-qa"
    if not (folder / "dev.jsonl").is_file():
        from winnow.datasets.wiki_vital_qa import build_wiki_vital_qa

        step("building wiki-vital QA (NQ-open and TriviaQA test questions)")
        build_wiki_vital_qa(folder)
    return folder


def train(workdir: Path, name: str, steps: int, args: argparse.Namespace):
    from winnow.training.sft import SFTSettings, train_sft

    settings = SFTSettings(base="smollm2-135m", data=str(workdir / f"blend-{name}"), out=str(workdir / f"run-{name}"),
                           lora=True, max_steps=steps, batch_size=args.batch_size, grad_accum=args.grad_accum,
                           lr=args.lr, warmup_steps=args.warmup, save_steps=args.save_steps, threads=args.threads,
                           seed=0)
    step(f"fine-tuning smollm2-135m on the {VARIANTS[name].label}: {steps} steps x "
         f"{args.batch_size * args.grad_accum} examples, LoRA r=16, lr {args.lr}, {args.threads} thread(s)")

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
    """P("True") per (question, passage) with the rankrag method's own reranker stage, and the model seconds."""
    import winnow
    from winnow.stages import PointwiseTrueReranker

    llm = winnow.load_llm(model, backend="transformers", cache=workdir / "calls.sqlite", threads=threads)
    reranker = PointwiseTrueReranker(llm)
    total = sum(len(c) for c, _ in lists)
    started, done, out, model_seconds = time.perf_counter(), 0, [], 0.0
    try:
        for candidates, _ in lists:
            trace = Trace()
            ranked = reranker.rank(candidates, trace)
            out.append({c.passage.id: c.score_of("rerank") for c in ranked})
            # A cached call keeps the seconds it took when it ran, so a rerun reports the real cost.
            model_seconds += sum(call.seconds for stage in trace.stages for call in stage.llm_calls)
            done += len(candidates)
            console.print(f"  {label}: {done}/{total} pairs scored ({time.perf_counter() - started:.0f} s)",
                          highlight=False, end="\r")
    finally:
        llm.close()
    console.print()
    return out, model_seconds


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


METRIC_NAMES = {
    "auc_judged_vs_answer_free": "AUC of P(True): judged-relevant vs answer-free",
    "auc_answer_vs_answer_free": "AUC of P(True): answer-holding vs answer-free (retrieved)",
    "mean_p_true_judged": "mean P(True), judged-relevant",
    "mean_p_true_answer_free": "mean P(True), answer-free",
    "recall@1": "answer Recall@1 after reranking",
    "recall@5": "answer Recall@5 after reranking",
}


def render(evaluation: dict[str, Any], variants: dict[str, dict[str, Any]]) -> str:
    """The docs/results.md section: the held-out figures of the base model and of every tuned variant."""
    base = evaluation["base"]
    lines = [
        SECTION, "",
        f"`bench/bench_train.py` ({evaluation['date']}, {evaluation['threads']} CPU thread). SmolLM2-135M-Instruct "
        "(the Q4_1 GGUF, dequantised to float32) fine-tuned with a LoRA adapter (r=16, alpha 32, every linear "
        "layer), then compared with the untuned model through the same transformers backend and the rankrag "
        "method's own P(\"True\") reranker (the Appendix D.1 prompt, the very prompt the ranking examples "
        "were trained with).", "",
    ]
    for name, result in variants.items():
        blend, training = result["blend"], result["training"]
        lines.append(
            f"- **{VARIANTS[name].label.capitalize()}** ({blend['size']:,} examples; "
            + ", ".join(f"{kind} {share:.0%}" for kind, share in blend["shares_by_kind"].items())
            + f"): {training['steps']} steps x {training['examples_per_step']} examples = "
            f"{training['examples_seen']} seen ({training['share_of_blend']:.1%} of the blend) in "
            f"{training['minutes']:.1f} min, lr {training['lr']}; loss {training['first_loss']:.2f} → "
            f"{training['last_loss']:.2f} (mean of the first / last five steps {training['first5']:.2f} → "
            f"{training['last5']:.2f}).")
    blend = variants["real"]["blend"] if "real" in variants else next(iter(variants.values()))["blend"]
    lines += [
        f"- **Data**: NQ-open and TriviaQA **dev** questions mined against the wiki-vital BM25 index "
        f"({blend['questions_with_gold']}); {blend['contaminated']} examples dropped by the contamination "
        f"check against {blend['eval_questions']:,} evaluation questions (every QA test set and wiki-vital QA).",
        f"- **Held-out evaluation**: {evaluation['questions']} wiki-vital QA **dev** questions (from NQ-open and "
        f"TriviaQA *test*; never trained on), BM25 top {evaluation['depth']} each plus their judged articles: "
        f"{evaluation['pairs']:,} pairs, {evaluation['judged']} judged-relevant, {evaluation['answer_free']:,} "
        f"retrieved without an answer. Recall is over the BM25 top {evaluation['depth']} reranked by P(True); "
        "intervals are paired bootstrap 95% intervals of tuned − base over questions.", "",
        "| | base | " + " | ".join(f"tuned: {VARIANTS[n].label} (Δ, 95% CI)" for n in variants) + " |",
        "|---|---:|" + "---:|" * len(variants),
    ]
    for key, label in METRIC_NAMES.items():
        cells = []
        for result in variants.values():
            tuned, ci = result["tuned"], result["interval_95"]
            interval = f", {ci[key][0]:+.3f} to {ci[key][1]:+.3f}" if key in ci else ""
            cells.append(f"{tuned[key]:.3f} ({tuned[key] - base[key]:+.3f}{interval})")
        lines.append(f"| {label} | {base[key]:.3f} | " + " | ".join(cells) + " |")
    lines.append(f"| answer Recall@1 / @5, BM25 order (no reranking) | {base['bm25_recall@1']:.3f} / "
                 f"{base['bm25_recall@5']:.3f} |" + " |" * len(variants))
    lines += ["", *(f"{VARIANTS[n].label.capitalize()}: {r['verdict']}" for n, r in variants.items()), "",
              f"Scoring {evaluation['pairs']:,} pairs takes about {scoring_minutes(evaluation, variants):.0f} min "
              "per model on one thread. Reproduce: `.venv/bin/python bench/bench_train.py --variant real --record` "
              "(about 35 min), then `--variant ranking --record`; blends, runs (resumed from their checkpoints) and "
              "scores (the LLM call cache) are reused when present.", ""]
    return "\n".join(lines)


def scoring_minutes(evaluation: dict[str, Any], variants: dict[str, dict[str, Any]]) -> float:
    """Minutes to score every pair once; a run served from the call cache took ~0 s, so the slowest counts."""
    return max([evaluation["seconds"]["base"], *(r["seconds"] for r in variants.values())]) / 60


def verdict(base: dict[str, float], tuned: dict[str, float], ci: dict[str, list[float]]) -> str:
    parts = []
    for key, what in (("auc_judged_vs_answer_free", "the AUC of P(True)"),
                      ("recall@1", "answer Recall@1 after reranking"),
                      ("recall@5", "answer Recall@5 after reranking")):
        low, high = ci[key]
        change = f"{tuned[key] - base[key]:+.3f}"
        if low > 0:
            parts.append(f"{what} rises ({change}; the interval excludes zero)")
        elif high < 0:
            parts.append(f"{what} falls ({change}; the interval excludes zero)")
        else:
            parts.append(f"{what} does not change beyond noise ({change})")
    gaps = {k: tuned[f"recall@{k}"] - tuned[f"bm25_recall@{k}"] for k in (1, 5)}
    parts.append(f"the tuned reranker's Recall@1 / @5 are {gaps[1]:+.3f} / {gaps[5]:+.3f} against BM25's own order")
    return "; ".join(parts) + "."


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


def train_and_score(name: str, args: argparse.Namespace, workdir: Path, lists, questions, qrels,
                    base_rows) -> dict[str, Any]:
    stats = ensure_blend(workdir, name)
    steps = args.steps or VARIANTS[name].steps
    report = train(workdir, name, steps, args)
    run = workdir / f"run-{name}"
    scores, seconds = score(str(run), lists, workdir, args.threads, f"tuned ({VARIANTS[name].label})")
    rows = per_question(questions, qrels, lists, scores)
    base, tuned = metrics(base_rows), metrics(rows)
    ci = bootstrap(base_rows, rows, ["auc_judged_vs_answer_free", "auc_answer_vs_answer_free", "recall@1", "recall@5"])
    curve = (run / "curve.csv").read_text().splitlines()[1:]
    losses = [float(line.split(",")[2]) for line in curve]
    seen = report.steps * args.batch_size * args.grad_accum
    training = {"steps": report.steps, "examples_per_step": args.batch_size * args.grad_accum, "examples_seen": seen,
                "share_of_blend": seen / stats["size"], "lr": args.lr, "first_loss": losses[0],
                "last_loss": losses[-1], "first5": sum(losses[:5]) / len(losses[:5]),
                "last5": sum(losses[-5:]) / len(losses[-5:]), "minutes": float(curve[-1].split(",")[5]) / 60}
    return {"evaluation": evaluation_key(args), "blend": blend_summary(stats), "training": training, "tuned": tuned,
            "interval_95": ci, "seconds": seconds, "verdict": verdict(base, tuned, ci)}


def evaluation_key(args: argparse.Namespace) -> dict[str, int]:
    """What makes two variants' figures comparable: the same questions, depth and sample seed."""
    return {"questions": args.eval_questions, "depth": args.depth, "seed": args.seed}


def print_table(evaluation: dict[str, Any], variants: dict[str, dict[str, Any]]) -> None:
    table = Table(title=f"Base vs tuned SmolLM2-135M on {evaluation['questions']} wiki-vital QA dev questions",
                  title_justify="left")
    table.add_column("metric")
    table.add_column("base", justify="right")
    for name in variants:
        table.add_column(f"tuned: {VARIANTS[name].label} (Δ, 95% CI)", justify="right")
    for key, base in evaluation["base"].items():
        cells = []
        for result in variants.values():
            tuned, ci = result["tuned"][key], result["interval_95"]
            interval = f", {ci[key][0]:+.3f} to {ci[key][1]:+.3f}" if key in ci else ""
            cells.append(f"{tuned:.3f} ({tuned - base:+.3f}{interval})")
        table.add_row(key, f"{base:.3f}", *cells)
    Console().print(table)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=cache_root() / "train-bench")
    parser.add_argument("--variant", choices=[*VARIANTS, "all"], default="real",
                        help="real: the Stage-II blend; ranking: its ranking pairs only (an ablation)")
    parser.add_argument("--steps", type=int, default=None, help="default: per variant, about 20 min on 1 thread")
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
    benchmark = ensure_benchmark()
    questions, qrels = eval_questions(benchmark, args.eval_questions, args.seed)
    lists = candidate_lists(index, questions, qrels, args.depth)
    step(f"scoring {sum(len(c) for c, _ in lists):,} (question, passage) pairs with the base model")
    base_scores, base_seconds = score("smollm2-135m", lists, workdir, args.threads, "base")
    base_rows = per_question(questions, qrels, lists, base_scores)
    evaluation = {"date": time.strftime("%Y-%m-%d"), "threads": args.threads, "questions": len(questions),
                  "depth": args.depth, "pairs": sum(len(c) for c, _ in lists),
                  "judged": sum(len(r["judged"]) for r in base_rows),
                  "answer_free": sum(len(r["answer_free"]) for r in base_rows),
                  "base": metrics(base_rows), "seconds": {"base": base_seconds}}
    (workdir / "evaluation.json").write_text(json.dumps(evaluation, indent=2) + "\n")
    chosen = list(VARIANTS) if args.variant == "all" else [args.variant]
    for name in chosen:
        result = train_and_score(name, args, workdir, lists, questions, qrels, base_rows)
        (workdir / f"results-{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    # Every variant measured so far on this evaluation (an earlier run of another variant included).
    variants = {name: json.loads((workdir / f"results-{name}.json").read_text())
                for name in VARIANTS if (workdir / f"results-{name}.json").is_file()}
    variants = {name: r for name, r in variants.items() if r.get("evaluation") == evaluation_key(args)}
    print_table(evaluation, variants)
    for name, result in variants.items():
        console.print(f"{VARIANTS[name].label}: {result['verdict']}", highlight=False)
    if args.record:
        record(render(evaluation, variants))
        console.print(f"recorded in {RESULTS}")
    console.print(f"done in {(time.perf_counter() - started) / 60:.1f} min; results in {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
