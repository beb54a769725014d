"""How passage embeddings are stored and scored: float16 (the default), int8 or float32.

* ``float16`` halves float32's size (768-dimensional vectors of 21M passages: 32 GB instead of
  64 GB). Its rounding (relative 2^-11) can swap passages whose scores tie to about 1e-3; such
  swaps are within the noise of any encoder. Scored block by block: each block of rows is widened to
  float32, because BLAS has no float16 product and numpy's own one is many times slower.
* ``int8``: each row scaled by its own largest magnitude to [-127, 127] (symmetric, per-row scale
  kept in ``scales.npy``), a quarter of float32; the score is ``(query · codes) × scale``, the inner
  product with the dequantised row.
* ``float32``: indexes made before the storage choice existed, or when exactness matters more than
  size.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

Storage = Literal["float16", "int8", "float32"]
STORAGES: tuple[Storage, ...] = ("float16", "int8", "float32")
DEFAULT_STORAGE: Storage = "float16"
# Rows widened to float32 at a time when scoring float16/int8 storage: 16,384 × 768 × 4 B = 50 MB.
BLOCK_ROWS = 16_384


def quantise(vectors: np.ndarray, storage: Storage) -> tuple[np.ndarray, np.ndarray | None]:
    """``vectors`` (float32) as stored: the array, and per-row scales for int8 (else None)."""
    if storage == "float32":
        return np.asarray(vectors, dtype=np.float32), None
    if storage == "float16":
        return vectors.astype(np.float16), None
    peak = np.abs(vectors).max(axis=1)
    scales = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    codes = np.clip(np.rint(vectors / scales[:, None]), -127, 127).astype(np.int8)
    return codes, scales


def widen(stored: np.ndarray, scales: np.ndarray | None, start: int = 0, stop: int | None = None) -> np.ndarray:
    """Rows ``start:stop`` of the stored matrix as float32 vectors (dequantised for int8)."""
    block = np.asarray(stored[start:stop], dtype=np.float32)
    if scales is not None:
        block *= scales[start:stop, None]
    return block


def inner_products(queries: np.ndarray, stored: np.ndarray, scales: np.ndarray | None) -> np.ndarray:
    """``queries @ rows.T`` for every stored row, float32, [queries, rows]."""
    queries = np.asarray(queries, dtype=np.float32)
    if stored.dtype == np.float32 and scales is None:
        products: np.ndarray = queries @ stored.T
        return products
    scores = np.empty((len(queries), len(stored)), dtype=np.float32)
    for start in range(0, len(stored), BLOCK_ROWS):
        stop = min(start + BLOCK_ROWS, len(stored))
        scores[:, start:stop] = queries @ np.asarray(stored[start:stop], dtype=np.float32).T
        if scales is not None:
            scores[:, start:stop] *= scales[start:stop]
    return scores
