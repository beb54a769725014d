"""What a GGUF model load spends reading the file's training framing (not a test: it prints figures).

Every local model load asks whether the GGUF carries ``winnow.framing`` (models/loading.py). The
``gguf`` package's reader answered by building every element of every metadata array, the
tokenizer's vocabulary included; ``winnow.models.gguf_metadata`` walks the header and decodes only
the key. Each reader runs ``--repeats`` times in a fresh process per model (so no Python-level cache
answers), side by side, with the whole ``LlamaCppBackend`` load beside them.

Usage: .venv/bin/python bench/bench_model_load.py [--models smollm2-135m qwen2.5-coder-1.5b] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

READERS = {
    "gguf package (before)": "import gguf; f = gguf.GGUFReader(path).get_field('winnow.framing')",
    "header walk (now)": "from winnow.models.gguf_metadata import gguf_string; gguf_string(path, 'winnow.framing')",
    "whole LlamaCppBackend load (now)": ("from winnow.llm.llamacpp import LlamaCppBackend; "
                                         "LlamaCppBackend(path, context_size=4096).close()"),
}


def timed(model: str, code: str) -> float:
    """Seconds ``code`` takes in a fresh process, the model file resolved (and verified) beforehand."""
    script = ("import time; from pathlib import Path; from winnow.models import resolve_model; "
              f"path = Path(resolve_model({model!r}, progress=False).path); t = time.perf_counter(); {code}; "
              "print(time.perf_counter() - t)")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return float(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["smollm2-135m", "qwen2.5-coder-1.5b"])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("| model | reader | median s | runs |\n|---|---|---:|---|")
    for model in args.models:
        medians = {}
        for name, code in READERS.items():
            runs = [timed(model, code) for _ in range(args.repeats)]
            medians[name] = statistics.median(runs)
            print(f"| {model} | {name} | {medians[name]:.3f} | {', '.join(f'{r:.3f}' for r in runs)} |", flush=True)
        before, now = medians["gguf package (before)"], medians["header walk (now)"]
        print(f"| {model} | ratio before / now | {before / now:.0f}× | |", flush=True)


if __name__ == "__main__":
    main()
