"""Approximate nearest-neighbour indexes over an index's embeddings, with faiss, beside exact search.

* ``hnsw``: a hierarchical navigable small-world graph (Malkov & Yashunin 2018, IEEE TPAMI 42(4)),
  ``IndexHNSWFlat`` with inner product. ``M`` links per node, ``efConstruction`` candidates kept
  while inserting, ``efSearch`` while searching (the recall/speed knob). It keeps the vectors in
  float32: memory ≈ rows × (4·d + 8·M) bytes.
* ``ivfpq``: an inverted file over ``nlist`` k-means cells with product-quantised residuals
  (Jégou, Douze & Schmid 2011, IEEE TPAMI 33(1)): ``m`` sub-vectors of ``nbits`` bits each, so a
  768-dimensional vector takes m bytes; ``nprobe`` cells are visited per query (by default one in
  seven, at least 16: recall follows the share of cells visited, measured in docs/benchmarks.md). Its PQ distances
  are approximate, so (as in the paper's §IV.C re-ranking) the top ``refine × k`` it finds are
  re-scored exactly against the stored embeddings before the top k are kept.

Both use the inner product, the score every preset is trained for (cosine for normalised ones).
Exact search stays the default; an ANN index is built at index time (``--ann``) or later
(:func:`add_ann_index`, ``winnow ann``), stored as ``dense/ann-KIND.faiss``, listed in the
manifest (so its size and sha256 are checked like every file) and its row count and dimension
checked against the embeddings at open.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..atomic import staged_file
from ..errors import IndexLoadError
from ..extras import import_extra
from ..settings import SettingError
from .vectors import widen

ANN_KINDS = ("hnsw", "ivfpq")
FEATURE = "approximate search (--ann hnsw|ivfpq)"
ADD_ROWS = 65_536  # rows widened to float32 and added at a time: bounds the build's extra memory
TRAIN_ROWS_PER_CELL = 64  # faiss warns below 39 points per centroid; 64 keeps k-means stable and quick


@dataclass(frozen=True, slots=True)
class HnswSettings:
    M: int = 32  # noqa: N815 (faiss's and the paper's name)
    efConstruction: int = 200  # noqa: N815
    # 0: by size (default_ef_search). Measured recall@100 against exact (bench/bench_dense.py, MiniLM):
    # 200k rows: 256 → 0.988; 1M rows (21k real + synthetic): 256 → 0.974, 512 → 0.986.
    efSearch: int = 0  # noqa: N815


@dataclass(frozen=True, slots=True)
class IvfPqSettings:
    nlist: int = 0  # 0: about 4·√rows cells, the usual rule of thumb, at least 1
    m: int = 0  # 0: dimensions / 4 sub-vectors (e.g. 96 of 4 dimensions for 384)
    nbits: int = 8
    # 0: one cell in seven. Measured recall@100 against exact (bench/bench_dense.py, MiniLM): 21k
    # real vectors, 330 cells: nprobe 32 → 0.878, 64 → 0.944; 200k (21k real + synthetic), 1,788
    # cells: 128 → 0.891, 256 → 0.928. Recall follows the share of cells visited.
    nprobe: int = 0
    refine: int = 4  # re-score the top refine × k exactly


AnnSettings = HnswSettings | IvfPqSettings


def ann_settings(kind: str, values: Mapping[str, str | int] | None = None) -> AnnSettings:
    """The settings of ``kind`` with ``values`` (``{"M": "48"}``, from ``--ann-set M=48``) applied."""
    if kind not in ANN_KINDS:
        raise SettingError("ann", f"--ann {kind!r} is not an ANN index kind", f"choose one of {', '.join(ANN_KINDS)}")
    settings: AnnSettings = HnswSettings() if kind == "hnsw" else IvfPqSettings()
    names = {f.name for f in fields(settings)}
    changes: dict[str, int] = {}
    for name, value in (values or {}).items():
        if name not in names:
            raise SettingError(f"ann.{name}", f"--ann-set {name}: {kind} has no setting {name!r}",
                               f"its settings are {', '.join(sorted(names))}")
        try:
            number = int(value)
        except ValueError:
            raise SettingError(f"ann.{name}", f"--ann-set {name}={value!r}: expected a whole number") from None
        if number < (0 if name in ("nlist", "m", "nprobe", "efSearch") else 1):
            raise SettingError(f"ann.{name}", f"--ann-set {name}={number}: must be at least 1")
        changes[name] = number
    return type(settings)(**{**asdict(settings), **changes})


def parse_assignments(items: list[str] | None) -> dict[str, str]:
    """``["M=48", "efSearch=512"]`` → ``{"M": "48", "efSearch": "512"}``."""
    parsed = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise SettingError("ann", f"--ann-set {item!r}: expected NAME=VALUE, e.g. efSearch=512")
        parsed[name.strip()] = value.strip()
    return parsed


def import_faiss() -> Any:
    return import_extra("faiss", "dense", FEATURE)


def file_name(kind: str) -> str:
    return f"ann-{kind}.faiss"


def resolved(settings: AnnSettings, rows: int, dimensions: int) -> AnnSettings:
    """Settings left at 0 (``efSearch``; ``nlist``, ``m``, ``nprobe``) replaced by their defaults for
    this many rows and dimensions."""
    if isinstance(settings, HnswSettings):
        return replace(settings, efSearch=settings.efSearch or default_ef_search(rows))
    nlist = settings.nlist or max(1, min(int(4 * math.sqrt(rows)), rows // TRAIN_ROWS_PER_CELL or 1))
    m = settings.m or max(1, dimensions // 4)
    if dimensions % m:
        raise SettingError("ann.m", f"--ann-set m={m}: the {dimensions} dimensions must split into m equal parts",
                           f"choose a divisor of {dimensions}")
    return replace(settings, nlist=nlist, m=m, nprobe=settings.nprobe or default_nprobe(nlist))


def default_ef_search(rows: int) -> int:
    """256 candidates per query below half a million rows, 512 from there: at 1M rows 256 missed the
    0.98 recall@100 target (0.974) and 512 met it (0.986), at 28x exact search's speed."""
    return 256 if rows < 500_000 else 512


def default_nprobe(nlist: int) -> int:
    """One cell in seven, and at least 16 (or all, when fewer): small indexes are cheap to scan."""
    return max(math.ceil(nlist / 7), min(nlist, 16))


def check_trainable(settings: IvfPqSettings, rows: int) -> None:
    """IVF-PQ learns 2^nbits codewords per sub-vector and ``nlist`` cells from the stored rows: with
    fewer rows than either, faiss stops with its own traceback, so refuse first, naming the setting."""
    if rows < 2 ** settings.nbits:
        raise SettingError("nbits", f"IVF-PQ with nbits={settings.nbits} learns {2 ** settings.nbits} codewords and "
                                    f"needs at least as many passages; this index has {rows}",
                           "lower it (--ann-set nbits=4), or use --ann hnsw or exact search for so few passages")
    if rows < settings.nlist:
        raise SettingError("nlist", f"IVF-PQ with nlist={settings.nlist} needs at least as many passages; this "
                                    f"index has {rows}",
                           "lower it with --ann-set nlist=N, or leave it at 0 (automatic)")


def build_ann(stored: np.ndarray, scales: np.ndarray | None, settings: AnnSettings, out: Path, *,
              progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Build the index of ``settings`` over the stored embeddings into the file ``out`` (atomically);
    return its manifest description (kind, settings, build seconds)."""
    faiss = import_faiss()
    rows, dimensions = stored.shape
    settings = resolved(settings, rows, dimensions)
    started = time.perf_counter()
    if isinstance(settings, HnswSettings):
        index = faiss.IndexHNSWFlat(dimensions, settings.M, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = settings.efConstruction
        kind = "hnsw"
    else:
        check_trainable(settings, rows)
        quantiser = faiss.IndexFlatIP(dimensions)
        index = faiss.IndexIVFPQ(quantiser, dimensions, settings.nlist, settings.m, settings.nbits,
                                 faiss.METRIC_INNER_PRODUCT)
        sample = min(rows, max(settings.nlist * TRAIN_ROWS_PER_CELL, 2 ** settings.nbits * TRAIN_ROWS_PER_CELL))
        # An evenly spaced sample: corpus order is often by topic, a prefix would train on one topic.
        chosen = np.linspace(0, rows - 1, num=sample).astype(np.int64)
        training = np.asarray(stored[chosen], dtype=np.float32)
        if scales is not None:
            training *= scales[chosen, None]
        index.train(training)
        kind = "ivfpq"
    for start in range(0, rows, ADD_ROWS):
        index.add(widen(stored, scales, start, min(start + ADD_ROWS, rows)))
        if progress is not None:
            progress(min(ADD_ROWS, rows - start))
    seconds = time.perf_counter() - started
    with staged_file(out) as temp:
        faiss.write_index(index, str(temp))
    return {"kind": kind, "settings": asdict(settings), "seconds": round(seconds, 3),
            "library": f"faiss {faiss.__version__}"}


class AnnSearcher:
    """An opened ANN index: ``search(queries, k)`` gives (rows, scores) like exact search."""

    def __init__(self, index: Any, kind: str, settings: AnnSettings, stored: np.ndarray,
                 scales: np.ndarray | None) -> None:
        self.index = index
        self.kind = kind
        self.settings = settings
        self.stored = stored
        self.scales = scales
        self.tune({})

    def tune(self, overrides: Mapping[str, str | int]) -> None:
        """Change search settings (efSearch; nprobe, refine) without reading the index again."""
        self.settings = ann_settings(self.kind, {**asdict(self.settings), **overrides})
        if isinstance(self.settings, HnswSettings):
            self.index.hnsw.efSearch = self.settings.efSearch or default_ef_search(self.index.ntotal)
        else:
            self.index.nprobe = self.settings.nprobe or default_nprobe(self.index.nlist)

    @classmethod
    def open(cls, folder: Path, description: Mapping[str, Any], stored: np.ndarray, scales: np.ndarray | None,
             overrides: Mapping[str, str | int] | None = None) -> AnnSearcher:
        """Read ``folder/ann-KIND.faiss`` and check it against the embeddings (rows, dimensions)."""
        faiss = import_faiss()
        kind = description.get("kind")
        if kind not in ANN_KINDS:
            raise IndexLoadError(f"{folder}: the manifest describes an unknown ANN index {kind!r}")
        saved = {**description.get("settings", {}), **(overrides or {})}
        settings = ann_settings(kind, {name: value for name, value in saved.items()})
        path = folder / file_name(kind)
        try:
            index = faiss.read_index(str(path))
        except RuntimeError as exc:
            raise IndexLoadError(f"{path} is corrupt: {str(exc).splitlines()[0]}",
                                 f"rebuild it: `winnow ann {folder.parent} --ann {kind}`") from exc
        if index.ntotal != len(stored) or index.d != stored.shape[1]:
            raise IndexLoadError(f"{path} holds {index.ntotal} vectors of {index.d} dimensions; the embeddings are "
                                 f"{len(stored)} of {stored.shape[1]}",
                                 f"rebuild it: `winnow ann {folder.parent} --ann {kind}`")
        return cls(index, kind, settings, stored, scales)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows and scores [queries, ≤ k] best first; rows of -1 (fewer hits than k) are dropped by the caller."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        k = min(k, len(self.stored))
        if isinstance(self.settings, IvfPqSettings) and self.settings.refine > 1:
            depth = min(len(self.stored), k * self.settings.refine)
            _, candidates = self.index.search(queries, depth)
            return self.rescore(queries, candidates, k)
        scores, rows = self.index.search(queries, k)
        return rows, scores

    def rescore(self, queries: np.ndarray, candidates: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Exact inner products of each query with its candidates; the top k of them."""
        rows_out = np.full((len(queries), k), -1, dtype=np.int64)
        scores_out = np.full((len(queries), k), -np.inf, dtype=np.float32)
        for i, (query, found) in enumerate(zip(queries, candidates, strict=True)):
            found = found[found >= 0]
            order = np.sort(found)  # ascending rows read the memory map forwards
            vectors = np.asarray(self.stored[order], dtype=np.float32)
            if self.scales is not None:
                vectors *= self.scales[order, None]
            exact = vectors @ query
            best = np.lexsort((order, -exact))[:k]  # ties by corpus order, as exact search
            rows_out[i, :len(best)] = order[best]
            scores_out[i, :len(best)] = exact[best]
        return rows_out, scores_out
