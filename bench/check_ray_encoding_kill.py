"""A Ray encoding whose driver is killed with SIGKILL mid-run, then run again (a check, not a test: it
prints what it saw; too slow for the suite). Issue 27 item 5.

Starts a one-node Ray cluster on 127.0.0.1 (2 CPUs), indexes the first P wiki-vital summaries (BM25),
and runs a driver process that embeds them on 2 workers in shards of S passages. Once 3 shards are
written the driver is killed with SIGKILL; the script then counts the encoder actors still alive
after 5 s (Ray stops a dead driver's actors), runs the same driver again, and checks that it
resumed from the shards written and that the embeddings are the single process's (the packaged
MiniLM run here, in this process).

Usage: .venv/bin/python bench/check_ray_encoding_kill.py [--passages 400] [--shard-rows 50] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from ray_head import SRC, ray_head  # noqa: E402

from winnow.corpus import load_corpus  # noqa: E402
from winnow.index import build_bm25_index, load_embedder  # noqa: E402
from winnow.index.embedding_shards import work_folder  # noqa: E402

DRIVER = """
import json, sys
from winnow.index import add_dense_embeddings, load_embedder
from winnow.index.ray_encoding import RayEncoding
rates = []
add_dense_embeddings(sys.argv[1], embedder=load_embedder(threads=1), shard_rows=int(sys.argv[3]), progress=False,
                     ray=RayEncoding(address=sys.argv[2], workers=2), rates=rates)
print(json.dumps([[r.host, r.shards, r.passages] for r in rates]))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passages", type=int, default=400)
    parser.add_argument("--shard-rows", type=int, default=50)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="check-ray-kill-"))
    passages = load_corpus("wiki-vital").passages[:args.passages]
    index = build_bm25_index(passages, work / "index", source="wiki-vital", source_checksum="check", overwrite=True,
                             progress=False)
    shards_total = -(-len(passages) // args.shard_rows)
    command = [sys.executable, "-c", DRIVER, str(index), "", str(args.shard_rows)]
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    with ray_head(cpus=2) as address:
        command[4] = address
        driver = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        shards = work_folder(index)
        while len(list(shards.glob("*.npy"))) < 3:
            if driver.poll() is not None:
                raise SystemExit(f"the driver ended before 3 shards were written:\n{driver.stderr.read()}")
            time.sleep(0.5)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        written = len(list(shards.glob("*.npy")))
        print(f"killed the driver (SIGKILL) with {written} of {shards_total} shards written")
        time.sleep(5)
        listing = subprocess.run(["ps", "-eo", "cmd"], capture_output=True, text=True).stdout
        print(f"encoder actors alive 5 s later: {sum('ShardEncoder' in line for line in listing.splitlines())}")
        again = subprocess.run(command, env=env, capture_output=True, text=True)
    resumed = " ".join(line for line in again.stderr.splitlines() if "resumed" in line)
    print(f"the same driver again: exit {again.returncode}; {resumed or 'no resume reported'}; "
          f"[worker, shards, passages] embedded now: {again.stdout.strip()}")
    stored = np.load(index / "dense" / "embeddings.npy").astype(np.float32)
    fresh = load_embedder(threads=1).embed_passages(passages)
    print(f"embeddings equal to the single process's (atol 2e-3, float16 rows): "
          f"{np.allclose(stored, fresh, atol=2e-3)}")


if __name__ == "__main__":
    main()
