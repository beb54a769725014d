"""The ``dense/`` folder of an index: passage embeddings and the model that made them.

``dense/embeddings.npy`` is a ``[passages, dimensions]`` NumPy array, row i the embedding of row i
of the passage store (as the encoder's preset feeds it: for MiniLM title, a newline, then text, as
BM25 indexes it), stored as float16 (the default), int8 (with per-row scales in ``dense/scales.npy``) or float32
(see :mod:`.vectors`); ``dense/model.json`` is the encoder's identity (preset, models, revisions,
sha256 sums). All are listed in the manifest like every other file, so a missing or truncated one
is refused on opening, and the array's shape must be [passages, dimensions] (rows == passages).
The embeddings are computed in resumable shards (:mod:`.embedding_shards`) and then assembled.
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
from .embedding_shards import SHARD_ROWS, WORK_SUFFIX, discard_work, embed_in_shards
from .vectors import DEFAULT_STORAGE, STORAGES, Storage, quantise

if TYPE_CHECKING:
    from .encoders import DenseEncoder
    from .ray_encoding import RayEncoding, WorkerRate

DENSE_DIR = "dense"
EMBEDDINGS_FILE = "embeddings.npy"
MODEL_FILE = "model.json"
SCALES_FILE = "scales.npy"
DTYPE = "float32"  # indexes written before the storage choice
BUILD_DENSE = "embed the index's passages: `winnow embed DIR` (or build it with `winnow index SOURCE --out DIR " \
              "--dense --overwrite`)"


def write_dense_folder(folder: Path, passages: Sequence[Passage], embedder: DenseEncoder, *,
                       progress: Callable[[int], None] | None = None, storage: Storage = DEFAULT_STORAGE,
                       work: Path | None = None, shard_rows: int = SHARD_ROWS,
                       report: Callable[[str], None] | None = None, ray: RayEncoding | None = None,
                       rates: list[WorkerRate] | None = None) -> dict[str, Any]:
    """Embed ``passages`` into ``folder/embeddings.npy`` (as ``storage``) and describe the encoder in
    ``folder/model.json``.

    ``folder`` must exist (a temporary folder: callers rename it into place). With ``work`` (see
    :func:`.embedding_shards.work_folder`), the vectors are computed in resumable shards kept there;
    without, in a temporary work folder inside ``folder``'s parent that is removed at the end.
    With ``ray``, the shards are computed on a Ray cluster (:mod:`.ray_encoding`; ``passages``
    must then be an index's passage store), each worker's rate added to ``rates``.
    Returns the manifest's ``dense`` section, with the embedding time and rate.
    """
    if storage not in STORAGES:
        raise ValueError(f"unknown embedding storage {storage!r}: choose one of {', '.join(STORAGES)}")
    started = time.perf_counter()
    temporary = work is None
    work = work if work is not None else folder.parent / f"{folder.name}{WORK_SUFFIX}"
    runner = None
    if ray is not None:
        from .ray_encoding import ray_runner

        runner = ray_runner(ray, passages, embedder, report=report, rates=rates)
    shards = embed_in_shards(passages, embedder, work, shard_rows=shard_rows, progress=progress, report=report,
                             runner=runner)
    seconds = time.perf_counter() - started
    dtype = np.dtype(np.int8 if storage == "int8" else storage)
    matrix = np.lib.format.open_memmap(folder / EMBEDDINGS_FILE, mode="w+", dtype=dtype,
                                       shape=(len(passages), embedder.dimensions))
    scales = np.empty(len(passages), dtype=np.float32) if storage == "int8" else None
    row = 0
    for shard in shards:
        stored, shard_scales = quantise(np.load(shard, allow_pickle=False), storage)
        matrix[row:row + len(stored)] = stored
        if scales is not None and shard_scales is not None:
            scales[row:row + len(stored)] = shard_scales
        row += len(stored)
    matrix.flush()
    del matrix  # closes the map before the folder is renamed and the file hashed
    if scales is not None:
        np.save(folder / SCALES_FILE, scales)
    if temporary:
        discard_work(work)
    identity = embedder.identity
    (folder / MODEL_FILE).write_text(json.dumps(identity, indent=2) + "\n", encoding="utf-8")
    return {
        "model": identity["model"],
        "preset": identity.get("preset", "minilm"),
        "dimensions": embedder.dimensions,
        "dtype": storage,
        "text": "title, newline, text" if identity.get("preset", "minilm") == "minilm"
        else identity.get("passage_format", ""),
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


def load_embeddings(index: Path, manifest: dict[str, Any], dimensions: int) -> tuple[np.ndarray, np.ndarray | None]:
    """The index's embeddings, memory-mapped read-only, and their int8 scales (else None), after
    checking storage, shape and row count against the manifest."""
    check_dense_listed(index, manifest)
    storage = manifest["dense"].get("dtype", DTYPE)
    if storage not in STORAGES:
        raise IndexLoadError(f"{index}'s manifest names an unknown embedding storage {storage!r}", BUILD_DENSE)
    path = index / DENSE_DIR / EMBEDDINGS_FILE
    mapped = _map(path)
    rows = manifest["counts"]["passages"]
    expected = np.dtype(np.int8 if storage == "int8" else storage)
    if mapped.dtype != expected or mapped.shape != (rows, dimensions):
        raise IndexLoadError(f"{path} holds {mapped.dtype} {list(mapped.shape)}; the index needs {expected} "
                             f"[{rows}, {dimensions}] (one row per passage)", BUILD_DENSE)
    scales = None
    if storage == "int8":
        if f"{DENSE_DIR}/{SCALES_FILE}" not in manifest["files"]:
            raise IndexLoadError(f"{index} is corrupt: int8 embeddings but its manifest does not list "
                                 f"{DENSE_DIR}/{SCALES_FILE}", BUILD_DENSE)
        scales = _map(index / DENSE_DIR / SCALES_FILE)
        if scales.dtype != np.float32 or scales.shape != (rows,):
            raise IndexLoadError(f"{index / DENSE_DIR / SCALES_FILE} holds {scales.dtype} {list(scales.shape)}; "
                                 f"the index needs float32 [{rows}]", BUILD_DENSE)
        scales = np.asarray(scales)
    return np.asarray(mapped), scales  # plain ndarray views of the maps: products on them return ndarrays


def _map(path: Path) -> np.ndarray:
    try:
        mapped: np.ndarray = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise IndexLoadError(f"{path} is corrupt: {exc}", BUILD_DENSE) from exc
    return mapped


def check_dense_listed(index: Path, manifest: dict[str, Any]) -> None:
    """The manifest has a ``dense`` section and lists both dense files (so their sizes were checked)."""
    if not isinstance(manifest.get("dense"), dict):
        raise IndexLoadError(f"{index} has no dense embeddings", BUILD_DENSE)
    for name in (EMBEDDINGS_FILE, MODEL_FILE):
        if f"{DENSE_DIR}/{name}" not in manifest["files"]:
            raise IndexLoadError(f"{index} is corrupt: its manifest has a dense section but does not list "
                                 f"{DENSE_DIR}/{name}", BUILD_DENSE)
