"""Passage embeddings computed in shards that survive a killed run, so the next run resumes.

Embedding a large corpus takes hours (21M passages at a few hundred per second on a CPU), so the
work is cut into shards of ``shard_rows`` passages, each written (float32, whole or not at all,
through :mod:`winnow.atomic`) into a work folder beside the index, ``.NAME.dense-work``, that
outlives the index's own temporary build folder. A shard's file name carries a digest of its
passages (ids, titles, texts), and ``plan.json`` the encoder's identity and the shard size: a rerun
reuses exactly the shards whose passages and encoder are unchanged and embeds the rest. Once the
index is in place, the work folder is deleted (:func:`discard_work`).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..atomic import staged_file, write_json
from ..errors import WinnowError
from ..records import Passage

if TYPE_CHECKING:
    from .encoders import DenseEncoder

SHARD_ROWS = 8192
WORK_SUFFIX = ".dense-work"
PLAN = "plan.json"


def work_folder(index: Path) -> Path:
    """Where shards of ``index``'s embeddings are kept until the index is complete."""
    index = Path(index).expanduser()
    return index.parent / f".{index.name}{WORK_SUFFIX}"


def shard_digest(passages: Sequence[Passage]) -> str:
    digest = hashlib.sha256()
    for passage in passages:
        for part in (passage.id, passage.title, passage.text):
            digest.update(part.encode("utf-8"))
            digest.update(b"\x1f")
        digest.update(b"\x1e")
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class Shard:
    """One shard of the work: passage rows ``start`` to ``stop`` (exclusive), embedded into ``path``."""

    number: int
    start: int
    stop: int
    path: Path


#: Computes the pending shards' files (each whole, through :mod:`winnow.atomic`), telling ``progress``
#: of passages embedded: the single-process loop of :func:`embed_in_shards`, or a cluster's
#: (:mod:`.ray_encoding`).
ShardRunner = Callable[[Sequence["Shard"], Callable[[int], None]], None]


def embed_in_shards(passages: Sequence[Passage], encoder: DenseEncoder, work: Path, *,
                    shard_rows: int = SHARD_ROWS, progress: Callable[[int], None] | None = None,
                    report: Callable[[str], None] | None = None, runner: ShardRunner | None = None) -> list[Path]:
    """Embed ``passages`` into shards under ``work``; return the shard files in order.

    Shards already there (same plan, same passages) are kept and counted on ``progress``;
    ``report`` hears how many were resumed or discarded. ``runner`` computes the missing shards
    (default: one after another in this process, with ``encoder``); whoever computes them, the
    files, their names and the plan are the same, so a run started one way resumes the other.
    """
    if shard_rows < 1:
        raise ValueError(f"shard_rows must be at least 1 (got {shard_rows})")
    told = progress or (lambda n: None)
    shards = plan_shards(passages, encoder, work, shard_rows=shard_rows, report=report)
    pending = []
    for shard in shards:
        if _complete(shard.path, shard.stop - shard.start, encoder.dimensions):
            told(shard.stop - shard.start)
            continue
        for other in work.glob(f"{shard.number:06d}-*.npy"):  # this shard's passages changed since
            other.unlink()
        pending.append(shard)
    if report is not None and len(pending) < len(shards):
        report(f"resumed: {len(shards) - len(pending)} of {len(shards)} embedding shards were already done in {work}")
    if pending:
        (runner or local_runner(passages, encoder))(pending, told)
    missing = [s.path.name for s in pending if not _complete(s.path, s.stop - s.start, encoder.dimensions)]
    if missing:
        raise WinnowError(f"{len(missing)} embedding shard(s) were not written: {', '.join(missing[:3])}",
                          "run the same command again: the shards that were written are kept")
    return [shard.path for shard in shards]


def plan_shards(passages: Sequence[Passage], encoder: DenseEncoder, work: Path, *, shard_rows: int = SHARD_ROWS,
                report: Callable[[str], None] | None = None) -> list[Shard]:
    """The shards of ``passages`` under ``work`` (created), each named by its number and a digest of
    its passages; ``plan.json`` records the encoder and shard size, and shards another plan made are
    discarded (told to ``report``)."""
    identity = encoder.identity
    plan = {"encoder_sha256": identity["sha256"], "tokenizer_sha256": identity["tokenizer_sha256"],
            "dimensions": encoder.dimensions, "shard_rows": shard_rows}
    work.mkdir(parents=True, exist_ok=True)
    plan_path = work / PLAN
    if plan_path.is_file() and _read_plan(plan_path) != plan:
        stale = sorted(work.glob("*.npy"))
        for path in stale:
            path.unlink()
        if report is not None and stale:
            report(f"discarded {len(stale)} embedding shards in {work}: another encoder or shard size made them")
    if not plan_path.is_file() or _read_plan(plan_path) != plan:
        write_json(plan_path, plan)
    shards = []
    for number, start in enumerate(range(0, len(passages), shard_rows)):
        stop = min(start + shard_rows, len(passages))
        chunk = [passages[row] for row in range(start, stop)]
        shards.append(Shard(number, start, stop, work / f"{number:06d}-{shard_digest(chunk)}.npy"))
    return shards


def local_runner(passages: Sequence[Passage], encoder: DenseEncoder) -> ShardRunner:
    """Embed the shards one after another in this process."""
    def run(pending: Sequence[Shard], progress: Callable[[int], None]) -> None:
        for shard in pending:
            write_shard(shard.path, encoder.embed_passages([passages[row] for row in range(shard.start, shard.stop)],
                                                           progress=progress))
    return run


def write_shard(path: Path, vectors: np.ndarray) -> None:
    """A shard's vectors as float32, written whole or not at all."""
    with staged_file(path) as temp, temp.open("wb") as handle:
        np.save(handle, np.asarray(vectors, dtype=np.float32))


def _read_plan(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _complete(path: Path, rows: int, dimensions: int) -> bool:
    if not path.is_file():
        return False
    try:
        mapped = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError):
        return False
    return bool(mapped.dtype == np.float32 and mapped.shape == (rows, dimensions))


def discard_work(work: Path) -> None:
    """Delete the shards once the embeddings they made are in the index."""
    shutil.rmtree(work, ignore_errors=True)
