"""Parallel slots on the CPU (not a test: it prints figures). Issue 16's "CPU in-process" benchmark.

MAIN-RAG and RRR with the in-process llama.cpp backend on the same wiki-vital QA test questions,
four ways, all in one run:

* one at a time, 1 slot: each question's stages run to the end before the next (``method.ask``);
  llama.cpp decodes one sequence at a time. The reference every other row is compared with.
* one at a time, S slots: the same, but llama.cpp holds S sequences and decodes them together, so a
  stage's calls for one question (MAIN-RAG's N per-document answers and judgements) share batches.
* batch, 1 slot / batch, S slots: the batch engine (``method.ask_batch``), each stage over a whole
  round of questions, so there are more calls to share batches with.

The machine is shared, so timings are noisy: the questions are taken a round at a time (a round is
one batch for the batch engine) and every configuration runs on each round before the next round
starts, in an order rotated from round to round, so a busy spell slows all configurations alike.
Both backends stay loaded throughout; no call cache, so every call is a real model call.

Each configuration's answers are compared with the reference's: the answer text, and the scores
(every stage's candidate scores and every LLM call's output: generated text or choice
probabilities). "identical" means equal to the last bit; otherwise the largest difference is shown.

The full size takes about an hour and a half of two idle cores, so every finished (round, method,
configuration) is appended to ``--progress`` (one JSON line each, with the load average it ran at):
killed, or stopped with ``--stop-after`` rounds, the script starts again after the last finished
measurement, keeping each round's rotated order, so the interleaving holds across restarts.

Usage: .venv/bin/python bench/bench_slots.py [--questions 20] [--round 4] [--n 10] [--slots 4]
       [--methods mainrag rrr] [--model qwen2.5-coder-0.5b] [--threads T] [--work /tmp/winnow-bench-slots]
       [--progress FILE] [--stop-after ROUNDS] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from bench_cluster import prepare  # noqa: E402  (the wiki-vital index and QA questions, built once)

from winnow.index import open_retriever  # noqa: E402
from winnow.llm import load_llm  # noqa: E402
from winnow.methods import build_method  # noqa: E402


@dataclass
class Config:
    path: str  # "one at a time" or "batch"
    slots: int
    seconds: float = 0.0
    answers: list[Any] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.path}, {self.slots} slot{'s' if self.slots > 1 else ''}"


def fingerprint(answer: Any) -> dict[str, Any]:
    """What must not change between configurations: the answer, every stage's ranked candidates and
    scores, and every LLM call's output, in order. As JSON gives it back (lists, exact floats), so a
    fingerprint read from the progress file compares equal to one computed now."""
    stages = [(s.name, [(c["id"], c["score"]) for c in s.output], [c.output for c in s.llm_calls])
              for s in answer.trace.stages]
    return json.loads(json.dumps({"answer": answer.text, "stages": stages}))


def read_progress(path: Path, identity: dict[str, Any]) -> dict[tuple[int, str, str, int], dict[str, Any]]:
    """The finished (round, method, path, slots) entries of an earlier run of the same settings."""
    if not path.is_file():
        return {}
    done = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:  # the line a kill cut short: that entry runs again
            print(f"{path}:{number}: an unfinished line, left out", file=sys.stderr)
            continue
        if entry["identity"] != identity:
            sys.exit(f"error: {path}:{number} was written with other settings ({entry['identity']}, now "
                     f"{identity}): give another --progress file or delete this one")
        done[entry["round"], entry["method"], entry["path"], entry["slots"]] = entry
    return done


def append_progress(path: Path, entry: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def largest_difference(a: dict[str, Any], b: dict[str, Any]) -> float:
    """The largest absolute difference between two fingerprints' numbers (scores, probabilities),
    or infinity when their shapes differ (another candidate order, another number of rounds)."""
    if len(a["stages"]) != len(b["stages"]):
        return math.inf
    worst = 0.0
    for (name_a, ranked_a, calls_a), (name_b, ranked_b, calls_b) in zip(a["stages"], b["stages"], strict=True):
        if name_a != name_b or [i for i, _ in ranked_a] != [i for i, _ in ranked_b] or len(calls_a) != len(calls_b):
            return math.inf
        worst = max([worst, *(abs(x - y) for (_, x), (_, y) in zip(ranked_a, ranked_b, strict=True))])
        for out_a, out_b in zip(calls_a, calls_b, strict=True):
            if isinstance(out_a, dict) and isinstance(out_b, dict) and out_a.keys() == out_b.keys():
                worst = max([worst, *(abs(out_a[k] - out_b[k]) for k in out_a)])
            elif out_a != out_b:  # generated text: no distance, only equal or not
                return math.inf
    return worst


def compare(reference: list[dict[str, Any]], other: list[dict[str, Any]]) -> dict[str, Any]:
    differences = [largest_difference(a, b) for a, b in zip(reference, other, strict=True)]
    return {"same_answers": sum(a["answer"] == b["answer"] for a, b in zip(reference, other, strict=True)),
            "identical": sum(a == b for a, b in zip(reference, other, strict=True)),
            "largest_difference": max(differences, default=0.0)}


def run_round(method: Any, path: str, questions: list[str]) -> tuple[list[Any], float]:
    started = time.perf_counter()
    answers = [method.ask(q) for q in questions] if path == "one at a time" else method.ask_batch(questions)
    return answers, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--round", type=int, default=4, help="questions per round (the batch engine's batch)")
    parser.add_argument("--n", type=int, default=10, help="passages retrieved per question (N)")
    parser.add_argument("--k", type=int, default=5, help="passages answered from (RRR; at most N)")
    parser.add_argument("--slots", type=int, default=4, help="slots of the parallel configurations")
    parser.add_argument("--methods", nargs="+", default=["mainrag", "rrr"])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--threads", type=int, default=None,
                        help="llama.cpp's CPU threads (default: every core; 1 suffers least when others load "
                             "the machine, since llama.cpp's threads wait for each other at every step)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/winnow-bench-slots"),
                        help="where the wiki-vital index and QA questions are built once")
    parser.add_argument("--progress", type=Path, default=None,
                        help="append each finished measurement here and resume from it "
                             "(default: WORK/progress-MODEL.jsonl)")
    parser.add_argument("--stop-after", type=int, default=None, help="stop after this many new rounds")
    parser.add_argument("--json-out", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    if args.stop_after is not None and args.stop_after < 1:
        parser.error(f"--stop-after {args.stop_after}: give a number of rounds of 1 or more")
    progress = args.progress or args.work / f"progress-{args.model}.jsonl"
    identity = {"model": args.model, "n": args.n, "k": args.k, "round": args.round, "slots": args.slots,
                "threads": args.threads}
    done = read_progress(progress, identity)

    args.work.mkdir(parents=True, exist_ok=True)
    index_dir, queries = prepare(args.work)
    questions = [json.loads(line)["question"] for line in queries.read_text().splitlines()[:args.questions]]
    rounds = [questions[i:i + args.round] for i in range(0, len(questions), args.round)]
    index = open_retriever(index_dir, "bm25")
    llms = {slots: load_llm(args.model, cache=False, slots=slots, threads=args.threads) for slots in (1, args.slots)}
    configs = {method: [Config(path, slots) for path in ("one at a time", "batch") for slots in (1, args.slots)]
               for method in args.methods}
    settings = {"mainrag": {"n": args.n}, "rrr": {"n": args.n, "k": min(args.k, args.n)}}
    built = {(method, slots): build_method(method, index=index, llm=llm, **settings.get(method, {"n": args.n}))
             for method in args.methods for slots, llm in llms.items()}
    new_rounds = 0
    try:
        for number, batch in enumerate(rounds):
            if args.stop_after is not None and new_rounds >= args.stop_after:
                break
            ran = False
            for method in args.methods:
                order = configs[method][number % 4:] + configs[method][:number % 4]
                for config in order:
                    key = (number, method, config.path, config.slots)
                    if key not in done:
                        load = os.getloadavg()[0]
                        answers, seconds = run_round(built[method, config.slots], config.path, batch)
                        done[key] = {"identity": identity, "round": number, "method": method, "path": config.path,
                                     "slots": config.slots, "seconds": seconds, "load_average": load,
                                     "fingerprints": [fingerprint(a) for a in answers]}
                        append_progress(progress, done[key])
                        ran = True
                        print(f"round {number + 1}/{len(rounds)} {method:8} {config.label:22} "
                              f"{seconds / len(batch):7.2f} s/question (load average {load:.1f})",
                              file=sys.stderr, flush=True)
            new_rounds += ran
    finally:
        for llm in llms.values():
            llm.close()
    finished = [number for number in range(len(rounds))
                if all((number, m, c.path, c.slots) in done for m in args.methods for c in configs[m])]
    if len(finished) < len(rounds):
        print(f"{len(finished)} of {len(rounds)} rounds done ({progress}); run again to go on")
        return
    for method in args.methods:
        for config in configs[method]:
            for number in range(len(rounds)):
                entry = done[number, method, config.path, config.slots]
                config.seconds += entry["seconds"]
                config.answers.extend(entry["fingerprints"])
    loads = [entry["load_average"] for entry in done.values()]

    rows = []
    print(f"\n{args.model}, N={args.n}, {len(questions)} questions in rounds of {args.round}, "
          f"{args.slots} slots vs 1, {args.threads or 'all'} threads, configurations interleaved; "
          f"load average {min(loads):.1f}-{max(loads):.1f} at the starts of the measurements")
    print(f"{'method':8} {'configuration':24} {'s/question':>10} {'speed-up':>8} {'same answers':>12} "
          f"{'identical':>9} {'largest |Δ|':>11}")
    for method in args.methods:
        reference = configs[method][0]
        for config in configs[method]:
            same = compare(reference.answers, config.answers)
            per_question = config.seconds / len(questions)
            row = {"method": method, "path": config.path, "slots": config.slots, "questions": len(questions),
                   "seconds_per_question": round(per_question, 3),
                   "speed_up": round(reference.seconds / config.seconds, 3), **same}
            rows.append(row)
            difference = same["largest_difference"]
            shown = "-" if difference == 0 else ("shape" if math.isinf(difference) else f"{difference:.2g}")
            print(f"{method:8} {config.label:24} {per_question:10.2f} {row['speed_up']:7.2f}x "
                  f"{same['same_answers']:>6}/{len(questions):<5} {same['identical']:>3}/{len(questions):<5} "
                  f"{shown:>11}")
    print("speed-up: against one at a time with 1 slot; largest |Δ|: the largest difference of a score or a "
          "probability from that reference ('shape': another ranking, round count or generated text)")
    if args.json_out:
        args.json_out.write_text(json.dumps({"model": args.model, "n": args.n, "round": args.round,
                                             "load_average": [min(loads), max(loads)], "rows": rows},
                                            indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
