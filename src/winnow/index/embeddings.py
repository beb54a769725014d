"""The ``dense/`` folder of an index: passage embeddings and the model that made them.

``dense/embeddings.npy`` is a float32 ``[passages, 384]`` NumPy array, row i the embedding of row i
of the passage store (title, a newline, then text, as BM25 indexes it); ``dense/model.json`` is the
embedder's identity (model, packages, sha256 sums). Both are listed in the manifest like every other
file, so a missing or truncated one is refused on opening. float32 rather than float16: on the
10,033 wiki-vital passages float16 would halve 15 MB to 7.7 MB, but its rounding can swap near-tied
neighbours in a top-10 list, and float32 is what BLAS multiplies straight from the memory map.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import IndexLoadError
from ..records import Passage
from .analysis import indexed_text

if TYPE_CHECKING:
    from .embedder import Embedder

DENSE_DIR = "dense"
EMBEDDINGS_FILE = "embeddings.npy"
MODEL_FILE = "model.json"
DTYPE = "float32"
# Texts per embed call: bounds the memory a huge corpus needs (its vectors go straight to the
# memory-mapped file), while length-sorting within 8,192 texts saves nearly all the padding.
EMBED_CHUNK = 8192
BUILD_DENSE = "build an index with embeddings: `winnow index SOURCE --out DIR --dense` (add --overwrite to replace " \
              "this one), or call winnow.index.add_dense_embeddings(DIR)"


def write_dense_folder(folder: Path, passages: Sequence[Passage], embedder: Embedder, *,
                       progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Embed ``passages`` into ``folder/embeddings.npy`` and describe the model in ``folder/model.json``.

    ``folder`` must exist (a temporary folder: callers rename it into place). Returns the
    manifest's ``dense`` section, with the embedding time and rate.
    """
    started = time.perf_counter()
    matrix = np.lib.format.open_memmap(folder / EMBEDDINGS_FILE, mode="w+", dtype=np.dtype(DTYPE),
                                       shape=(len(passages), embedder.dimensions))
    for start in range(0, len(passages), EMBED_CHUNK):
        chunk = [passages[row] for row in range(start, min(start + EMBED_CHUNK, len(passages)))]
        matrix[start:start + len(chunk)] = embedder.embed([indexed_text(p) for p in chunk], progress=progress)
    matrix.flush()
    del matrix  # closes the map before the folder is renamed and the file hashed
    seconds = time.perf_counter() - started
    identity = embedder.identity
    (folder / MODEL_FILE).write_text(json.dumps(identity, indent=2) + "\n", encoding="utf-8")
    return {
        "model": identity["model"],
        "dimensions": embedder.dimensions,
        "dtype": DTYPE,
        "text": "title, newline, text",
        "seconds": round(seconds, 3),
        "passages_per_second": round(len(passages) / seconds, 1) if seconds > 0 else None,
    }


def read_model_identity(index: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """``dense/model.json`` of an index whose manifest has a ``dense`` section."""
    check_dense_listed(index, manifest)
    path = index / DENSE_DIR / MODEL_FILE
    try:
        identity = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise IndexLoadError(f"{path} is corrupt: {exc}", BUILD_DENSE) from exc
    if not isinstance(identity, dict) or not all(isinstance(identity.get(key), str)
                                                 for key in ("model", "sha256", "tokenizer_sha256")):
        raise IndexLoadError(f"{path} is corrupt: it does not name the model and its sha256 sums", BUILD_DENSE)
    return identity


def load_embeddings(index: Path, manifest: dict[str, Any], dimensions: int) -> np.ndarray:
    """The index's embeddings, memory-mapped read-only, after checking dtype, shape and row count."""
    check_dense_listed(index, manifest)
    path = index / DENSE_DIR / EMBEDDINGS_FILE
    try:
        mapped = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise IndexLoadError(f"{path} is corrupt: {exc}", BUILD_DENSE) from exc
    rows = manifest["counts"]["passages"]
    if mapped.dtype != np.dtype(DTYPE) or mapped.shape != (rows, dimensions):
        raise IndexLoadError(f"{path} holds {mapped.dtype} {list(mapped.shape)}; the index needs {DTYPE} "
                             f"[{rows}, {dimensions}] (one row per passage)", BUILD_DENSE)
    return np.asarray(mapped)  # a plain ndarray view of the map: products on it return ndarrays


def check_dense_listed(index: Path, manifest: dict[str, Any]) -> None:
    """The manifest has a ``dense`` section and lists both dense files (so their sizes were checked)."""
    if not isinstance(manifest.get("dense"), dict):
        raise IndexLoadError(f"{index} has no dense embeddings", BUILD_DENSE)
    for name in (EMBEDDINGS_FILE, MODEL_FILE):
        if f"{DENSE_DIR}/{name}" not in manifest["files"]:
            raise IndexLoadError(f"{index} is corrupt: its manifest has a dense section but does not list "
                                 f"{DENSE_DIR}/{name}", BUILD_DENSE)
