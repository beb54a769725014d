"""Counting tokens for prompt fitting: the server's /tokenize per count against --tokenizer (not a
test: it prints figures). Issue 28.

Starts SmolLM2-135M with llama.cpp in this process (its HTTP server on loopback, as `llama-server`
would serve it), and fits RankGPT windows of 20 wiki-vital passages to a 2,048-token context through
the OpenAI-compatible backend twice: counting with the server's ``/tokenize`` (a request per count),
and with ``--tokenizer smollm2-135m`` (the GGUF's tokenizer, here). Prints per window the wall time
and the requests sent to ``/tokenize``, and checks that both cut every window identically.

Usage: .venv/bin/python bench/bench_tokenizer.py [--windows 50] [--index /tmp/winnow-bench-sched/wiki-index]
(the index bench_scheduler.py builds)
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from winnow.index import BM25Index
from winnow.llm import LLM
from winnow.llm.llamacpp import LlamaCppBackend
from winnow.llm.openai_http import OpenAICompatibleBackend
from winnow.models import resolve_model
from winnow.prompts import listwise_prompt
from winnow.stages.fitting import fit_prompt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--windows", type=int, default=50)
    parser.add_argument("--index", type=Path, default=Path("/tmp/winnow-bench-sched/wiki-index"))
    args = parser.parse_args()
    passages = BM25Index.open(args.index).passages[:20 * args.windows]
    model = resolve_model("smollm2-135m", progress=False)
    server = LlamaCppBackend(model.path, model_name=model.name, model_sha256=model.sha256, context_size=2048)
    requests = {"tokenize": 0}

    def counting(asked):
        def request(method, url, *, json=None):
            if url.endswith(("/tokenize", "/apply-template", "/detokenize")):
                requests["tokenize"] += 1
            return asked(method, url, json=json)
        return request

    template = listwise_prompt("rrr.listwise")
    cuts = {}
    try:
        for label, tokenizer in (("server's /tokenize", ""), ("--tokenizer smollm2-135m", "smollm2-135m")):
            backend = OpenAICompatibleBackend("smollm2-135m", base_url=f"{server._server.listening_address}/v1",
                                              tokenizer=tokenizer)
            for endpoint in backend.dispatcher.endpoints:
                endpoint.request = counting(endpoint.request)  # the one session's start-up questions
            llm = LLM(backend, None)
            _ = llm.token_counting  # the server's facts (and the --tokenizer check) before the clock starts
            requests["tokenize"] = 0
            started = time.perf_counter()
            fitted_all = []
            for w in range(args.windows):
                fitted: list = []
                window = passages[20 * w:20 * w + 20]
                kept = fit_prompt(llm, lambda ps: template.messages("what is it?", ps, max_words=300), window,
                                  output_tokens=100, fitted=fitted)
                fitted_all.append([p.text for p in kept])
            seconds = time.perf_counter() - started
            cuts[label] = fitted_all
            print(f"{label:28} {1000 * seconds / args.windows:8.1f} ms a window  "
                  f"{requests['tokenize'] / args.windows:6.1f} tokenizer requests a window", flush=True)
            backend.close()
        first, second = cuts.values()
        print("identical cuts:", first == second)
    finally:
        server.close()


if __name__ == "__main__":
    main()
