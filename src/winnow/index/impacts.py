"""How a BM25 index stores its score arrays: the impact format and the passage rows' width.

Every posting holds a passage row and an *impact*, the term's BM25 contribution to that passage
(:mod:`.scoring`). bm25s stores both as 4-byte numbers, 8 bytes a posting: 4.6× Lucene's
postings at 100k passages (docs/benchmarks.md). Two savings, chosen at build:

* **Rows** (lossless, always): a score matrix of at most ``UINT16_ROWS`` passages stores its rows
  as uint16, 2 bytes, not int32. A sharded index (:mod:`.shards`) gets it in every shard whose size
  is at most 65,536 (``--shard-size 65536``); one bm25s matrix only up to 65,536 passages.
* **Impacts** (``--bm25-impacts``): ``float32``, the default, bm25s's own values (results as before,
  to the bit); ``float16``, rounded to half precision (10-bit mantissa, relative error ≤ 2^-11)
  and widened to float32 as they are read; ``uint8``, per-term linear quantisation as in
  quantised-impact indexes (Anh & Moffat, "Simplified similarity scoring using term ranks",
  SIGIR 2005, §3; PISA's ``--quantize``, Mallia et al., OSIRRC 2019): a term's impacts become
  codes 1..255 of one step, ``scale = max / 255`` over the term's postings in the whole index
  (so a shard and one matrix quantise alike), stored per term as float32 in ``scales.npy``; an
  impact is read as ``float32(code) × scale``. A stored impact is never zero (zero means "no
  evidence"): the smallest code or half-precision value stands for the smallest impacts.

The lossy formats change the scores, hence some rankings (their top-100 overlap with float32 is in
docs/benchmarks.md), but every search of one index reads the same float32 impacts (this module's
:func:`widen`), so the exhaustive product and MaxScore (:mod:`.pruning`) return the same hits to the
bit in every format, and the stored per-term maxima are those of the widened impacts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..errors import IndexLoadError, WinnowError

IMPACTS = ("float32", "float16", "uint8")
DEFAULT_IMPACTS = "float32"
STORED = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16), "uint8": np.dtype(np.uint8)}
# Rows 0..65,535 fit in uint16.
UINT16_ROWS = 65_536
# uint8's per-term steps, beside the score arrays (``bm25/scales.npy``, one float32 per term).
SCALES = "scales.npy"
LEVELS = 255
SMALLEST_HALF = np.float16(2.0 ** -24)  # float16's smallest positive (subnormal) value


def check_impacts(impacts: str) -> str:
    """``impacts`` if it names a format; else WinnowError naming ``--bm25-impacts`` and the choices."""
    if impacts not in IMPACTS:
        raise WinnowError(f"--bm25-impacts {impacts!r} is not an impact format", f"choose one of {', '.join(IMPACTS)}")
    return impacts


def index_impacts(manifest: dict[str, Any]) -> str:
    """The impact format an index's manifest records (float32 for an index built before it was recorded)."""
    bm25 = manifest.get("bm25")
    recorded = bm25.get("impacts", DEFAULT_IMPACTS) if isinstance(bm25, dict) else DEFAULT_IMPACTS
    return recorded if isinstance(recorded, str) else repr(recorded)


def row_dtype(num_docs: int) -> np.dtype[Any]:
    """The narrowest type holding rows 0..num_docs-1: uint16 up to ``UINT16_ROWS`` passages, else int32."""
    return np.dtype(np.uint16) if num_docs <= UINT16_ROWS else np.dtype(np.int32)


def quantised_scales(maxima: np.ndarray) -> np.ndarray:
    """uint8's per-term step: the term's largest impact over 255 (0 for a term without postings)."""
    return (np.asarray(maxima, dtype=np.float32) / np.float32(LEVELS)).astype(np.float32)


def encode(data: np.ndarray, indptr: np.ndarray, impacts: str, scales: np.ndarray | None = None) -> np.ndarray:
    """``data`` (float32 impacts, term-major by ``indptr``) in the format ``impacts``; uint8 needs the
    per-term ``scales`` (:func:`quantised_scales` of the terms' maxima over the whole index)."""
    if impacts == "float32":
        return data
    if impacts == "float16":
        half = data.astype(np.float16)
        half[(half == 0) & (data > 0)] = SMALLEST_HALF  # never "no evidence" for a posting
        return half
    if scales is None:
        raise ValueError("uint8 impacts need the per-term scales")
    steps = np.repeat(scales, np.diff(indptr))
    codes = np.rint(np.divide(data, steps, out=np.zeros(len(data), dtype=np.float32), where=steps > 0))
    stored: np.ndarray = np.clip(codes, 1, LEVELS).astype(np.uint8)
    return stored


def widen(stored: np.ndarray, scale: np.floating[Any] | np.ndarray | None) -> np.ndarray:
    """Stored impacts as the float32 values every search adds: float32 as they are, float16 widened
    (exactly), uint8 codes times their term's ``scale`` (one float32 rounding, the same wherever the
    code is read). ``scale``: a term's (a scalar) or each value's (an array); None unless uint8."""
    if scale is not None:
        return stored.astype(np.float32) * scale
    return stored if stored.dtype == np.float32 else stored.astype(np.float32)


def widen_all(stored: np.ndarray, indptr: np.ndarray, scales: np.ndarray | None) -> np.ndarray:
    """Every posting's float32 impact (term-major by ``indptr``), for the build's per-term maxima."""
    return widen(stored, None if scales is None else np.repeat(scales, np.diff(indptr)))


def check_arrays(where: str, data: np.ndarray, indices: np.ndarray, num_docs: int, impacts: str, hint: str) -> None:
    """The score arrays at ``where`` are in the format the manifest records: impacts of its type, rows
    int32 or (for at most ``UINT16_ROWS`` passages) uint16. IndexLoadError otherwise, with ``hint``."""
    if impacts not in STORED:
        raise IndexLoadError(f"{where}: the manifest's bm25.impacts {impacts!r} is not a format this Winnow reads "
                             f"({', '.join(IMPACTS)})", hint)
    if data.dtype != STORED[impacts]:
        raise IndexLoadError(f"{where} is inconsistent: its impacts are {data.dtype}, the manifest records {impacts}",
                             hint)
    rows = (np.dtype(np.int32), np.dtype(np.uint16)) if num_docs <= UINT16_ROWS else (np.dtype(np.int32),)
    if indices.dtype not in rows:
        raise IndexLoadError(f"{where} is inconsistent: its passage rows are {indices.dtype} for {num_docs} passages "
                             f"(expected {' or '.join(map(str, rows))})", hint)


def load_scales(index: Path, name: str, impacts: str, terms: int, hint: str) -> np.ndarray | None:
    """uint8's per-term scales ``name`` (memory-mapped), one float32 per term; None for other formats."""
    return load_per_term(index, name, terms, hint) if impacts == "uint8" else None


def load_per_term(index: Path, name: str, terms: int, hint: str) -> np.ndarray:
    """The file ``name`` of one float32 per term (scales, maxima), memory-mapped, its shape checked."""
    values: np.ndarray = np.load(index / name, mmap_mode="r", allow_pickle=False)
    if values.shape != (terms,) or values.dtype != np.float32:
        raise IndexLoadError(f"{index} is inconsistent: {name} holds {values.shape} {values.dtype} values, not one "
                             f"float32 per term ({terms})", hint)
    return values
