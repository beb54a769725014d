"""BM25 built in shards of bounded memory, searched shard by shard with the top k merged exactly.

bm25s builds its score matrix in memory from every passage's tokens at once (4.1 GB resident for
1M passages, docs/benchmarks.md), so DPR's 21M passages cannot be built on a 24 GB machine. Here the
corpus is cut into shards of ``shard_size`` passages, read in one pass:

1. **Per shard** (memory bounded by the shard): its passages go to a shard passage store, its texts
   are tokenised with the index's analysis (:mod:`.analysis`), and the term ids, per-passage
   boundaries and the shard's vocabulary are written to ``.OUT.shards/shard-NNNN/``, a marker last.
   A killed build resumes from the last finished shard: the corpus is read again, the finished
   shards' passages are skipped without being tokenised (the work folder is kept only for the same
   source, checksum, profile and shard size).
2. **Finalising** (memory bounded by a shard plus one vocabulary and 16 bytes a passage): the
   vocabularies are merged, document frequencies and the average length summed over all shards,
   and each shard's term × passage score matrix computed with these *global* statistics, rows in
   the global vocabulary's order. The passage stores are concatenated into one.

Scores are those bm25s computes for one index of the whole corpus, bit for bit: the same Lucene
idf (``log(1 + (N − df + 0.5) / (df + 0.5))``, float32), the same term-frequency component
``tf / (k1 · ((1 − b) + b · dl / avgdl) + tf)`` in float64, the product rounded to float32. A
query's score is summed over its terms in the same order in both (:mod:`.scoring` orders them by
term), so searching every shard and merging the top k by (score, row) gives exactly the single
index's top k (tests/test_shards.py checks it).
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable, Iterable
from itertools import islice
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from rich.console import Console
from rich.progress import MofNCompleteColumn, Progress

from ..atomic import atomic_folder, write_json
from ..errors import IndexLoadError, WinnowError
from ..progress import progress_bar
from ..records import Passage
from .analysis import FIELDS, bm25_profile, indexed_text, make_stemmer, stopword_list, tokenize_corpus
from .build import WHAT, LoadReportSource, looks_like_index
from .impacts import (
    DEFAULT_IMPACTS,
    SCALES,
    check_arrays,
    check_impacts,
    encode,
    index_impacts,
    load_per_term,
    load_scales,
    quantised_scales,
    row_dtype,
    widen_all,
)
from .manifest import SHARD_FILES, write_manifest
from .scoring import MAXIMA, Hits, TermScoreMatrix, highest, term_maxima
from .store import PassageStoreWriter, merge_stores

BM25_DIR = "bm25"
VOCABULARY = "vocab.json"
LAYOUT = "sharded"
DEFAULT_SHARD_SIZE = 500_000
DONE = "shard.json"
PLAN = "plan.json"


def work_folder(out: Path) -> Path:
    return out.parent / f".{out.name}.shards"


def build_sharded_index(passages: Iterable[Passage], out: str | Path, *, source: str, source_checksum: str,
                        shard_size: int = DEFAULT_SHARD_SIZE, load_report: LoadReportSource | None = None,
                        source_options: dict[str, Any] | None = None, profile: str = "default",
                        overwrite: bool = False, progress: bool = True,
                        report: Callable[[str], None] | None = None, impacts: str = DEFAULT_IMPACTS) -> Path:
    """Index ``passages`` into ``out`` in shards of ``shard_size`` (see the module notes); resumes a
    build of the same source killed part-way. ``impacts``: the score arrays' impact format
    (:mod:`.impacts`; a shard of at most 65,536 passages stores its rows as uint16). Returns ``out``."""
    if shard_size < 1:
        raise WinnowError(f"--shard-size must be at least 1, got {shard_size}")
    check_impacts(impacts)
    out = Path(out).expanduser()
    chosen = bm25_profile(profile)
    say = report or Console(stderr=True).print
    work = work_folder(out)
    plan = {"format": 1, "source": source, "source_checksum": source_checksum, "profile": chosen.name,
            "k1": chosen.k1, "b": chosen.b, "shard_size": shard_size}
    if work.exists() and _read_json(work / PLAN) != plan:
        say(f"removing {work}: a shard build of another source or settings")
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    write_json(work / PLAN, plan)
    finished = _finished_shards(work)
    if finished:
        say(f"resuming: {len(finished)} shards of {shard_size:,} passages already built in {work}")
    stemmer, stopwords = make_stemmer(chosen.stemmer), stopword_list(chosen.stopwords)
    stream = iter(passages)
    with progress_bar(*Progress.get_default_columns(), MofNCompleteColumn(), console=Console(stderr=True),
                  transient=True, disable=not progress) as bar:
        task = bar.add_task("shards", total=None)
        number = 0
        while True:
            chunk = list(islice(stream, shard_size))
            if not chunk:
                break
            folder = work / f"shard-{number:04d}"
            if number < len(finished):
                if finished[number] != len(chunk):
                    raise WinnowError(f"{folder} holds {finished[number]} passages, the corpus gives {len(chunk)} "
                                      "for it now", f"delete {work} and build again")
            else:
                _write_shard(folder, chunk, stemmer, stopwords)
            number += 1
            bar.update(task, advance=1, description=f"shard {number}")
    shards = [work / f"shard-{i:04d}" for i in range(number)]
    if not shards:
        raise WinnowError("there are no passages to index", "check the corpus: it is empty or every record was skipped")
    with atomic_folder(out, overwrite=overwrite, looks_ours=looks_like_index, what=WHAT, report=say) as temp:
        store = merge_stores(shards, temp)
        counts, bm25 = _score_shards(shards, temp / BM25_DIR, k1=chosen.k1, b=chosen.b, impacts=impacts)
        fields: dict[str, Any] = {
            "source": source, "source_checksum": source_checksum, "counts": counts, "store": store,
            "bm25": {"method": "lucene", "k1": chosen.k1, "b": chosen.b, "stopwords": chosen.stopwords,
                     "stemmer": chosen.stemmer, "fields": list(FIELDS), "profile": chosen.name, "layout": LAYOUT,
                     "shard_size": shard_size, **bm25, "impacts": impacts,
                     "library": "winnow shards (bm25s tokenizer)"},
        }
        if source_options:
            fields["source_options"] = source_options
        if load_report is not None:
            fields["load_report"] = load_report() if callable(load_report) else load_report
        write_manifest(temp, **fields)
    shutil.rmtree(work, ignore_errors=True)
    return out


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _finished_shards(work: Path) -> list[int]:
    """Passage counts of the consecutive finished shards (a marker is written last)."""
    counts: list[int] = []
    while (done := _read_json(work / f"shard-{len(counts):04d}" / DONE)) is not None:
        counts.append(int(done["rows"]))
    for stale in sorted(work.glob("shard-*")):  # a shard killed part-way is built again
        if stale.name >= f"shard-{len(counts):04d}":
            shutil.rmtree(stale)
    return counts


def _write_shard(folder: Path, chunk: list[Passage], stemmer: Any, stopwords: str | list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    writer = PassageStoreWriter(folder)
    for passage in chunk:
        writer.add(passage)
    writer.finish()
    tokens = tokenize_corpus([indexed_text(p) for p in chunk], stemmer, stopwords)
    lengths = np.fromiter((len(doc) for doc in tokens.ids), dtype=np.int64, count=len(chunk))
    np.save(folder / "doc_indptr.npy", np.concatenate([[0], np.cumsum(lengths)]))
    np.save(folder / "terms.npy", np.fromiter((t for doc in tokens.ids for t in doc), dtype=np.int32,
                                              count=int(lengths.sum())))
    local = sorted(tokens.vocab.items(), key=lambda item: item[1])
    (folder / VOCABULARY).write_text(json.dumps([term for term, _ in local], ensure_ascii=False), encoding="utf-8")
    write_json(folder / DONE, {"rows": len(chunk)})


def _score_shards(shards: list[Path], bm25: Path, *, k1: float, b: float,
                  impacts: str = DEFAULT_IMPACTS) -> tuple[dict[str, Any], dict[str, Any]]:
    """Write each shard's score matrix (rows: global vocabulary) under ``bm25``; global statistics first,
    then, for a lossy impact format, the impacts re-encoded with the whole index's per-term maxima."""
    vocabulary: dict[str, int] = {}
    maps = []
    for shard in shards:
        local = json.loads((shard / VOCABULARY).read_text(encoding="utf-8"))
        maps.append(np.array([vocabulary.setdefault(term, len(vocabulary)) for term in local], dtype=np.int64))
    size = len(vocabulary)
    if not size:
        raise WinnowError("no passage has a word to index: every word is a stop word, a single character or "
                          "punctuation", "check that the corpus holds text")
    doc_freqs = np.zeros(size, dtype=np.int64)
    lengths = []
    for shard, mapping in zip(shards, maps, strict=True):
        docs, terms = _pairs(shard, mapping)
        shard_lengths = np.diff(np.load(shard / "doc_indptr.npy"))
        keys, _ = _distinct(terms * len(shard_lengths) + docs)  # each (term, passage) once
        doc_freqs += np.bincount(keys // len(shard_lengths), minlength=size)
        lengths.append(shard_lengths)
    all_lengths = np.concatenate(lengths)
    total = len(all_lengths)
    avg_length = all_lengths.mean()  # as bm25s: the mean of an int64 array of lengths
    # Lucene's idf per distinct document frequency, through math.log as bm25s computes it.
    distinct, inverse = np.unique(doc_freqs, return_inverse=True)
    idf = np.array([math.log(1 + (total - df + 0.5) / (df + 0.5)) if df else 0.0 for df in distinct.tolist()],
                   dtype=np.float32)[inverse]
    bm25.mkdir(parents=True)
    rows = []
    largest = np.zeros(size, dtype=np.float32)  # each term's largest impact over every shard
    for number, (shard, mapping) in enumerate(zip(shards, maps, strict=True)):
        docs, terms = _pairs(shard, mapping)
        shard_docs = len(np.load(shard / "doc_indptr.npy")) - 1
        keys, tf = _distinct(terms * shard_docs + docs)  # term-major, then passage
        term_ids, doc_ids = np.divmod(keys, shard_docs)
        shard_lengths = np.diff(np.load(shard / "doc_indptr.npy"))[doc_ids]
        tf64 = tf.astype(np.float64)
        # bm25s's _score_tfc_robertson and idf * tfc, the same float64 operations in the same order.
        tfc = tf64 / (k1 * ((1 - b) + b * shard_lengths / avg_length) + tf64)
        data = (idf[term_ids].astype(np.float64) * tfc).astype(np.float32)
        indptr = np.concatenate([[0], np.cumsum(np.bincount(term_ids, minlength=size))]).astype(np.int64)
        folder = bm25 / f"shard-{number:04d}"
        folder.mkdir()
        np.save(folder / "data.npy", data)
        np.save(folder / "indices.npy", doc_ids.astype(row_dtype(shard_docs)))
        np.save(folder / "indptr.npy", indptr)
        np.save(folder / MAXIMA, maxima := term_maxima(data, indptr))
        np.maximum(largest, maxima, out=largest)
        rows.append(shard_docs)
    if impacts != DEFAULT_IMPACTS:
        _encode_shards(bm25, len(shards), impacts, largest)
    (bm25 / VOCABULARY).write_text(json.dumps(vocabulary, ensure_ascii=False), encoding="utf-8")
    counts = {"passages": total, "vocabulary": size, "tokens": int(all_lengths.sum())}
    return counts, {"shards": rows, "avg_length": float(avg_length)}


def _encode_shards(bm25: Path, count: int, impacts: str, largest: np.ndarray) -> None:
    """Each shard's float32 impacts rewritten as ``impacts``, uint8 with one scale per term for the
    whole index (``bm25/scales.npy``: a shard and one matrix of the same corpus quantise alike), and
    its maxima those of the impacts as stored."""
    scales = quantised_scales(largest) if impacts == "uint8" else None
    if scales is not None:
        np.save(bm25 / SCALES, scales)
    for number in range(count):
        folder = bm25 / f"shard-{number:04d}"
        data, indptr = np.load(folder / "data.npy"), np.load(folder / "indptr.npy")
        stored = encode(data, indptr, impacts, scales)
        np.save(folder / "data.npy", stored)
        np.save(folder / MAXIMA, term_maxima(widen_all(stored, indptr, scales), indptr))


def _distinct(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct values of ``keys`` and how often each occurs (np.unique's hash path is
    several times slower on these arrays than one sort)."""
    keys = np.sort(keys)
    if not len(keys):
        return keys, keys
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    return keys[starts], np.diff(np.r_[starts, len(keys)])


def _pairs(shard: Path, mapping: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(passage, global term) for every token of a shard, as int64 arrays."""
    indptr = np.load(shard / "doc_indptr.npy")
    terms = mapping[np.load(shard / "terms.npy")]
    docs = np.repeat(np.arange(len(indptr) - 1, dtype=np.int64), np.diff(indptr))
    return docs, terms


def load_maxima(index: Path, manifest: dict[str, Any], name: str, terms: int, hint: str) -> np.ndarray | None:
    """The stored per-term maxima ``name`` (memory-mapped), when the manifest lists the file (so it
    was size-checked and hashed like the others); None for an index built before they were stored,
    whose maxima are then found per term on first use (:mod:`.pruning`)."""
    return load_per_term(index, name, terms, hint) if name in manifest["files"] else None


class ShardedScorer:
    """The shards' score matrices, memory-mapped, answering like one :class:`TermScoreMatrix`."""

    def __init__(self, shards: list[TermScoreMatrix]) -> None:
        self.shards = shards
        self.starts = np.cumsum([0] + [shard.num_docs for shard in shards])
        self.num_docs = int(self.starts[-1])
        self.vocabulary: dict[str, int] = shards[0].vocabulary if shards else {}

    @classmethod
    def open(cls, index: Path, manifest: dict[str, Any], hint: str) -> ShardedScorer:
        folder = index / BM25_DIR
        impacts = index_impacts(manifest)
        try:
            vocabulary = json.loads((folder / VOCABULARY).read_text(encoding="utf-8"))
            scales = load_scales(index, f"{BM25_DIR}/{SCALES}", impacts, len(vocabulary), hint)
            shards = []
            for number, rows in enumerate(manifest["bm25"]["shards"]):
                data, indices, indptr = (np.load(folder / f"shard-{number:04d}" / name, mmap_mode="r",
                                                 allow_pickle=False) for name in SHARD_FILES)
                if len(indptr) != len(vocabulary) + 1:
                    raise IndexLoadError(f"{index} is inconsistent: {BM25_DIR}/{VOCABULARY} has {len(vocabulary)} "
                                         f"terms, shard {number}'s score arrays {len(indptr) - 1} rows", hint)
                check_arrays(f"{folder}/shard-{number:04d}", data, indices, int(rows), impacts, hint)
                maxima = load_maxima(index, manifest, f"{BM25_DIR}/shard-{number:04d}/{MAXIMA}", len(vocabulary), hint)
                shards.append(TermScoreMatrix(data, indices, indptr, int(rows), vocabulary, maxima, scales))
        except (OSError, ValueError, KeyError, TypeError, EOFError) as exc:
            raise IndexLoadError(f"{folder} is corrupt: {exc}", hint) from exc
        return cls(shards)

    def top_k(self, queries: Sequence[Sequence[str]], k: int) -> list[Hits]:
        """Each shard's top k, shifted to global rows, merged by (score, row): exactly the top k of one index."""
        per_shard = [shard.top_k(queries, k) for shard in self.shards]
        merged = []
        for position in range(len(queries)):
            rows = np.concatenate([hits[position].rows + start
                                   for hits, start in zip(per_shard, self.starts[:-1].tolist(), strict=True)])
            scores = np.concatenate([hits[position].scores for hits in per_shard])
            merged.append(highest(rows, scores, k))
        return merged

    def postings_length(self, term_id: int) -> int:
        return sum(shard.postings_length(term_id) for shard in self.shards)

    def postings_list(self, term_id: int, row: int) -> bool:
        """Whether the postings of ``term_id`` hold the passage ``row``."""
        number = int(np.searchsorted(self.starts, row, side="right")) - 1
        return self.shards[number].postings_list(term_id, row - int(self.starts[number]))
