"""A real llama.cpp HTTP server with parallel slots (not a test: it prints figures). Issue 16's
"Real server" benchmark.

Starts llama.cpp's own HTTP server (through xllamacpp, the build Winnow embeds) on 127.0.0.1 in a
process of its own, with S parallel slots and SmolLM2-135M, and runs rankrag and mainrag (N=20) on
wiki-vital QA test questions against it through the OpenAI-compatible backend, three ways:

* old: one question at a time (``winnow eval --batch-size 1``), at most 8 calls in flight;
* new: the batch engine over a round of questions (``--batch-size R``), at most 2·S calls in flight;
* old again: the first way a second time, to show how much the server itself varies from run to run.

Configurations take turns round by round (the order rotated each round), so the shared machine's
busy spells fall on all of them alike. Outputs (answers, every stage's scores, every call's output)
are compared with old's; questions/s and the ratio new/old are printed side by side.

Usage: .venv/bin/python bench/bench_real_server.py [--questions 16] [--round 8] [--slots 4]
       [--methods rankrag mainrag] [--model smollm2-135m] [--threads T] [--work /tmp/winnow-bench-slots]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_cluster import prepare  # noqa: E402
from bench_slots import compare, fingerprint, run_round  # noqa: E402

from winnow.index import open_retriever  # noqa: E402
from winnow.llm import load_llm  # noqa: E402
from winnow.methods import build_method  # noqa: E402

#: (label, path, calls in flight) of each configuration; ``None`` in flight means 2·S.
CONFIGS = (("old", "one at a time", 8), ("new", "batch", None), ("old again", "one at a time", 8))


def serve(model: str, slots: int, context_size: int, threads: int | None) -> None:
    """The server process: llama.cpp's HTTP server on loopback until the parent closes our stdin."""
    from winnow.llm.llamacpp import LlamaCppBackend
    from winnow.models import resolve_model

    resolved = resolve_model(model, progress=False)
    backend = LlamaCppBackend(resolved.path, model_name=resolved.name, slots=slots, context_size=context_size,
                              threads=threads)
    print(backend.http_address, flush=True)
    sys.stdin.read()
    backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--round", type=int, default=8, help="questions per round (the new path's batch)")
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--slots", type=int, default=4, help="the server's parallel slots")
    parser.add_argument("--context-size", type=int, default=4096, help="tokens per slot")
    parser.add_argument("--methods", nargs="+", default=["rankrag", "mainrag"])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--threads", type=int, default=None, help="the server's CPU threads (default: every core)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/winnow-bench-slots"))
    parser.add_argument("--json-out", type=Path, default=None)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the server process
    args = parser.parse_args()
    if args.serve:
        serve(args.model, args.slots, args.context_size, args.threads)
        return

    args.work.mkdir(parents=True, exist_ok=True)
    index_dir, queries = prepare(args.work)
    questions = [json.loads(line)["question"] for line in queries.read_text().splitlines()[:args.questions]]
    rounds = [questions[i:i + args.round] for i in range(0, len(questions), args.round)]
    index = open_retriever(index_dir, "bm25")
    server = subprocess.Popen([sys.executable, __file__, "--serve", "--model", args.model, "--slots", str(args.slots),
                               "--context-size", str(args.context_size),
                               *(["--threads", str(args.threads)] if args.threads else [])],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert server.stdout is not None and server.stdin is not None
    address = server.stdout.readline().strip()
    if not address.startswith("http://127.0.0.1:"):
        server.kill()
        raise RuntimeError(f"the llama.cpp server did not start on loopback (it said {address!r})")
    llms = {inflight: load_llm(args.model, backend="openai", base_url=f"{address}/v1", cache=False,
                               max_inflight=inflight) for inflight in {8, 2 * args.slots}}
    seconds = {(m, label): 0.0 for m in args.methods for label, _, _ in CONFIGS}
    answers: dict[tuple[str, str], list] = {key: [] for key in seconds}
    try:
        for number, batch in enumerate(rounds):
            for method in args.methods:
                for label, path, inflight in CONFIGS[number % 3:] + CONFIGS[:number % 3]:
                    rag = build_method(method, index=index, llm=llms[inflight or 2 * args.slots], n=args.n)
                    done, took = run_round(rag, path, batch)
                    seconds[method, label] += took
                    answers[method, label].extend(fingerprint(a) for a in done)
                    print(f"round {number + 1}/{len(rounds)} {method:8} {label:9} {len(batch) / took:7.4f} q/s",
                          file=sys.stderr, flush=True)
    finally:
        for llm in llms.values():
            llm.close()
        server.stdin.close()
        server.wait(timeout=60)

    print(f"\nllama.cpp HTTP server on 127.0.0.1, {args.slots} slots, {args.threads or 'all'} threads, "
          f"{args.model}, N={args.n}, "
          f"{len(questions)} questions, new path in rounds of {args.round}")
    print(f"{'method':8} {'path':9} {'q/s':>7} {'vs old':>7} {'same answers':>12} {'identical':>9} "
          f"{'largest |Δ|':>11}")
    rows = []
    for method in args.methods:
        for label, _, _ in CONFIGS:
            same = compare(answers[method, "old"], answers[method, label])
            rate = len(questions) / seconds[method, label]
            ratio = seconds[method, "old"] / seconds[method, label]
            difference = same["largest_difference"]
            shown = "-" if difference == 0 else ("shape" if math.isinf(difference) else f"{difference:.2g}")
            rows.append({"method": method, "path": label, "questions_per_second": round(rate, 3),
                         "ratio": round(ratio, 3), **same})
            print(f"{method:8} {label:9} {rate:7.4f} {ratio:6.2f}x {same['same_answers']:>6}/{len(questions):<5} "
                  f"{same['identical']:>3}/{len(questions):<5} {shown:>11}")
    print("same answers / identical / largest |Δ|: against old (see bench/bench_slots.py)")
    if args.json_out:
        args.json_out.write_text(json.dumps({"slots": args.slots, "model": args.model, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
