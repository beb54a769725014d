"""Do parallel slots change llama.cpp's numbers? (not a test: it prints figures)

The same prompts through the in-process backend with 1 slot and with S slots, each twice, in the
order 1, S, 1, S: 16 P("True") judgements (the eight passages of tests/small_corpus.py, two questions
each) and 8 greedy answers of up to 64 tokens. Prints the seconds of each pass, whether a pass
repeats the earlier pass with the same slots exactly, and how the S-slot answers differ from the
1-slot ones (how many scores differ, the largest |Δ log P(True)|, how many answers differ).

Usage: .venv/bin/python bench/bench_slot_rounding.py [--model smollm2-135m] [--slots 4]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from small_corpus import PASSAGES  # noqa: E402

from winnow.llm.llamacpp import LlamaCppBackend  # noqa: E402
from winnow.models import resolve_model  # noqa: E402

QUESTIONS = ("Who wrote the passage?", "What is the capital mentioned?")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    model = resolve_model(args.model, progress=False)
    judge = [[{"role": "user", "content": f"Passage: {p['text']}\nQuestion: {q}\nIs the passage relevant? "
                                          "Answer True or False."}] for p in PASSAGES for q in QUESTIONS]
    answer = [[{"role": "user", "content": f"Passage: {p['text']}\nQuestion: {q}\nAnswer in one sentence."}]
              for p in PASSAGES[:4] for q in QUESTIONS]
    seen: dict[int, tuple[list, list]] = {}
    for slots in (1, args.slots, 1, args.slots):
        backend = LlamaCppBackend(model.path, model_name=model.name, slots=slots, context_size=2048,
                                  threads=args.threads)
        started = time.perf_counter()
        scores = [s.logprobs["True"] for s in backend.choice_logprobs(judge, ["True", "False"])]
        judged = time.perf_counter()
        generations = backend.generate(answer, max_tokens=64)
        done = time.perf_counter()
        backend.close()
        texts = [g.text for g in generations]
        repeat = "" if slots not in seen else f"  repeats its earlier pass exactly: {seen[slots] == (scores, texts)}"
        seen.setdefault(slots, (scores, texts))
        print(f"{args.model} {slots} slot(s): {len(judge)} judgements {judged - started:.1f} s, {len(answer)} answers "
              f"({sum(g.completion_tokens for g in generations)} tokens) {done - judged:.1f} s{repeat}", flush=True)
    (one_scores, one_texts), (many_scores, many_texts) = seen[1], seen[args.slots]
    differences = [abs(a - b) for a, b in zip(one_scores, many_scores, strict=True)]
    print(f"{args.slots} slots vs 1: {sum(d > 0 for d in differences)}/{len(differences)} P(True) differ, largest "
          f"|Δ log P(True)| {max(differences):.3g}; {sum(a != b for a, b in zip(one_texts, many_texts, strict=True))}"
          f"/{len(one_texts)} answers differ")


if __name__ == "__main__":
    main()
