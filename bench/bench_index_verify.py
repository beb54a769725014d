"""What verifying an index's checksums on open costs, on a synthesised 1,000,000-passage index.

Opening an index checks every file's sha256 against the manifest (a flipped byte is refused, not
served), but only once: the verified state is recorded (``.verified.json``, see
``winnow/index/verified.py``) and later opens only stat the files. This script times, side by side:

* **plain open** - the open without the checksum step (manifest, sizes, bm25s arrays memory-mapped,
  passages read): what opening cost before verification existed;
* **first open** - the same plus hashing every file (and writing the record), as after copying an
  index or after any change to its files;
* **later open** - the same plus stat-ing the files and reading the record, as on every other open.

The checksum step is timed on its own (``verify_once``, as opening calls it) and added to the plain
open: reading a million passages dominates an open and, on a shared machine, varies by more than
the step costs. Each is run with the files in the page cache (warm: the common case) and evicted
from it first (cold: ``posix_fadvise(DONTNEED)`` on the index's own files, nothing else is touched),
``--repeat`` times; medians are shown with their ratio to the plain open. (A cold first open costs
a little less than the sum: hashing leaves the passages in the page cache for the load.)

The index is synthesised rather than built, so that it takes minutes, not twenty: random
pseudo-words (each its own Snowball stem) with Zipf-like frequencies, ``--words`` per passage, and
Lucene BM25 scores (k1=0.9, b=0.4) computed from those very texts in bm25s's saved CSC layout. It
has the file sizes of a real index of that many passages of that length, opens with
``BM25Index.open`` and answers searches.

Usage: .venv/bin/python bench/bench_index_verify.py [--passages 1000000] [--words 60] [--repeat 3]
       [--folder DIR] [--keep] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import bm25s
import numpy as np
from rich.console import Console
from rich.table import Table

from winnow.index import BM25Index
from winnow.index import manifest as manifest_module
from winnow.index.analysis import STEMMER_LABEL, STOPWORDS, make_stemmer
from winnow.index.build import BM25_DIR
from winnow.index.manifest import MANIFEST, write_manifest
from winnow.index.store import PassageStoreWriter
from winnow.index.verified import forget_verified
from winnow.records import Passage

K1, B = 0.9, 0.4
LETTERS = "bcdfghjklmnpqrstvwxz"
VOWELS = "aeiouy"


def pseudo_words(count: int, rng: np.random.Generator) -> list[str]:
    """``count`` distinct lower-case words, each its own Snowball stem and no stop word, so the
    synthesised vocabulary is exactly what bm25s would have built from the texts."""
    stemmer = make_stemmer(STEMMER_LABEL)
    stop = set(bm25s.stopwords.STOPWORDS_EN)
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < count:
        syllables = rng.integers(2, 4)
        word = "".join(LETTERS[rng.integers(len(LETTERS))] + VOWELS[rng.integers(len(VOWELS))]
                       for _ in range(syllables)) + LETTERS[rng.integers(len(LETTERS))]
        if word not in seen and word not in stop and stemmer.stemWord(word) == word:
            seen.add(word)
            words.append(word)
    return words


def synthesise_index(folder: Path, passages: int, words_per_passage: int, vocabulary: int, seed: int) -> None:
    """Write a complete index folder (bm25s arrays, passage store, manifest) of ``passages`` passages."""
    rng = np.random.default_rng(seed)
    words = pseudo_words(vocabulary, rng)
    # Zipf-like term frequencies: term t is drawn with probability proportional to 1 / (t + 10).
    weights = 1.0 / (np.arange(vocabulary) + 10.0)
    cumulative = np.cumsum(weights / weights.sum())
    (folder / BM25_DIR).mkdir(parents=True)
    keys_parts = []
    chunk = 100_000
    store = PassageStoreWriter(folder)
    for start in range(0, passages, chunk):
        rows = min(chunk, passages - start)
        terms = np.searchsorted(cumulative, rng.random((rows, words_per_passage))).astype(np.int64)
        np.minimum(terms, vocabulary - 1, out=terms)
        for number, row in enumerate(terms.tolist(), start=start):
            store.add(Passage(id=f"p{number}", text=" ".join(map(words.__getitem__, row))))
        docs = np.arange(start, start + rows, dtype=np.int64)[:, None]
        keys_parts.append((terms * passages + docs).ravel())
    keys, term_freqs = np.unique(np.concatenate(keys_parts), return_counts=True)  # sorted: term-major
    del keys_parts
    term_ids, doc_ids = np.divmod(keys, passages)
    del keys
    doc_freqs = np.bincount(term_ids, minlength=vocabulary)
    idf = np.log(1 + (passages - doc_freqs + 0.5) / (doc_freqs + 0.5))  # Lucene's idf
    # Every passage has the same length here, so the length normalisation is 1.
    data = (idf[term_ids] * term_freqs / (term_freqs + K1)).astype(np.float32)
    indptr = np.searchsorted(term_ids, np.arange(vocabulary + 2)).astype(np.int32)  # + the empty term
    bm25 = folder / BM25_DIR
    np.save(bm25 / "data.csc.index.npy", data)
    np.save(bm25 / "indices.csc.index.npy", doc_ids.astype(np.int32))
    np.save(bm25 / "indptr.csc.index.npy", indptr)
    vocab = {word: i for i, word in enumerate(words)}
    vocab[""] = vocabulary  # bm25s always has the empty term, with no postings
    (bm25 / "vocab.index.json").write_text(json.dumps(vocab), encoding="utf-8")
    (bm25 / "params.index.json").write_text(json.dumps({
        "k1": K1, "b": B, "delta": 0.5, "method": "lucene", "idf_method": "lucene", "dtype": "float32",
        "int_dtype": "int32", "num_docs": passages, "version": bm25s.__version__,
        "backend": "numpy"}, indent=4), encoding="utf-8")
    store_section = store.finish()
    write_manifest(folder, source="synthetic", source_checksum=f"seed-{seed}", store=store_section,
                   counts={"passages": passages, "vocabulary": vocabulary + 1, "tokens": passages * words_per_passage},
                   bm25={"method": "lucene", "k1": K1, "b": B, "stopwords": STOPWORDS, "stemmer": STEMMER_LABEL,
                         "fields": ["title", "text"], "library": "synthesised by bench_index_verify.py"})


def index_files(folder: Path) -> list[Path]:
    return [path for path in folder.rglob("*") if path.is_file()]


def evict(folder: Path) -> None:
    """Drop the index's own files from the page cache (they are clean: written and fsynced)."""
    for path in index_files(folder):
        handle = os.open(path, os.O_RDONLY)
        try:
            os.fsync(handle)
            os.posix_fadvise(handle, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(handle)


def plain_open(folder: Path) -> BM25Index:
    """``BM25Index.open`` without its checksum step: what opening cost before verification existed."""
    with mock.patch.object(manifest_module, "verify_once", lambda *args: None):
        return BM25Index.open(folder)


def median_seconds(action: Callable[[], Any], *, repeat: int, before: Callable[[], None] = lambda: None) -> float:
    seconds = []
    for _ in range(repeat):
        before()
        started = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def measure(folder: Path, repeat: int) -> dict[str, Any]:
    """The plain open, and the two ways the checksum step can go, each timed on its own.

    The step is timed apart from the open (``verify_once`` as ``read_manifest`` calls it) because
    reading a million passages dominates an open and varies by more, on a shared machine, than the
    step costs: a first or later open costs the plain open plus its step.
    """
    raw = (folder / MANIFEST).read_bytes()
    manifest, manifest_sha = json.loads(raw), hashlib.sha256(raw).hexdigest()
    size = sum(path.stat().st_size for path in index_files(folder))
    hashed = sum(info["size"] for info in manifest["files"].values())
    results: dict[str, Any] = {"bytes": size, "hashed_bytes": hashed, "files": len(manifest["files"]),
                               "cpus": os.cpu_count()}

    def full_check() -> None:
        forget_verified(folder)
        manifest_module.verify_once(folder, manifest, manifest_sha)

    def record_check() -> None:
        manifest_module.verify_once(folder, manifest, manifest_sha)

    for cache, before in (("warm", lambda: None), ("cold", lambda: evict(folder))):
        results[f"{cache}_plain"] = median_seconds(lambda: plain_open(folder), repeat=repeat, before=before)
        results[f"{cache}_full_check"] = median_seconds(full_check, repeat=repeat, before=before)
        results[f"{cache}_record_check"] = median_seconds(record_check, repeat=10 * repeat, before=before)
    index = BM25Index.open(folder)
    probe = index.passages[17]
    results["probe_rank"] = next((rank for rank, c in enumerate(index.search(probe.text, k=10), 1)
                                  if c.passage.id == probe.id), None)
    return results


def print_results(results: dict[str, Any], passages: int, words: int, build_seconds: float) -> None:
    console = Console()
    table = Table(title=f"Opening a {passages:,}-passage index ({words} words each; "
                        f"{results['bytes'] / 1e9:.2f} GB in {results['files']} files; synthesised in "
                        f"{build_seconds:.0f} s)", title_justify="left")
    table.add_column("open")
    for cache in ("warm", "cold"):
        table.add_column(f"{cache} cache, s", justify="right")
        table.add_column("× plain", justify="right")
    rows = {"plain (sizes only, no checksums)": None, "first (+ sha256 of every file, recorded)": "full_check",
            "later (+ stat the files, read the record)": "record_check"}
    for label, step in rows.items():
        cells = []
        for cache in ("warm", "cold"):
            plain = results[f"{cache}_plain"]
            seconds = plain + (results[f"{cache}_{step}"] if step else 0.0)
            cells += [f"{seconds:.3f}", f"{seconds / plain:.3f}"]
        table.add_row(label, *cells)
    console.print(table)
    gigabytes = results["hashed_bytes"] / 1e9
    console.print(f"the checksum step alone: {results['warm_full_check']:.2f} s warm "
                  f"({gigabytes / results['warm_full_check']:.2f} GB/s on {results['cpus']} cores), "
                  f"{results['cold_full_check']:.2f} s cold; the record check alone: "
                  f"{results['warm_record_check'] * 1000:.2f} ms warm, {results['cold_record_check'] * 1000:.2f} ms "
                  f"cold. Sanity search: passage 17 found at rank {results['probe_rank']}.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=1_000_000)
    parser.add_argument("--words", type=int, default=60, help="words per passage")
    parser.add_argument("--vocabulary", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--folder", type=Path, help="where to synthesise (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the index afterwards")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    parent = Path(tempfile.mkdtemp(prefix="winnow-verify-bench-", dir=args.folder))
    folder = parent / "index"
    try:
        started = time.perf_counter()
        synthesise_index(folder, args.passages, args.words, args.vocabulary, args.seed)
        build_seconds = time.perf_counter() - started
        results = measure(folder, args.repeat)
        results.update(passages=args.passages, words=args.words, synthesis_seconds=round(build_seconds, 1))
        if args.json:
            print(json.dumps(results, indent=2))
        else:
            print_results(results, args.passages, args.words, build_seconds)
    finally:
        if not args.keep:
            shutil.rmtree(parent, ignore_errors=True)


if __name__ == "__main__":
    main()
