"""The record that an index's files were checked against its manifest, so later opens need not re-hash.

Hashing every byte at every open would cost a large index seconds (figures for a 1M-passage index
in docs/benchmarks.md). So the first open hashes every file the manifest lists and, when all match,
records the state it verified in ``.verified.json`` beside the manifest: the manifest's own sha256
and, per file, its size, mtime_ns, ctime_ns and inode. A later open only stats the files. Any write
to a file changes its ctime, which user space cannot set back (so restoring the mtime after a
same-size edit does not hide it), and a file replaced by another has another inode: either way the
record no longer matches and the files are hashed again. What a record cannot see is damage below
the file system (a failing disk); ``BM25Index.verify()`` re-hashes on demand.

A build writes the record itself (it has just hashed the files it wrote), so the first open of a
fresh index is cheap too. The record is written whole or not at all (:mod:`winnow.atomic`); an index
in a folder that cannot be written (a read-only mount) keeps its record in the user's cache
instead, under a name derived from the folder's absolute path.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path

from ..atomic import write_json
from ..errors import WinnowError
from ..paths import cache_root
from .signature import index_key, record_mac

VERIFIED = ".verified.json"
RECORD_FORMAT = 1


def file_states(folder: Path, names: list[str]) -> dict[str, list[int]]:
    """Size, mtime_ns, ctime_ns and inode of each named file: what any change to it would change."""
    states = {}
    for name in names:
        stat = os.stat(folder / name)
        states[name] = [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]
    return states


def was_verified(folder: Path, manifest_sha256: str, states: dict[str, list[int]]) -> bool:
    """Whether a record says exactly these files, under exactly this manifest, were verified. With an
    index key set (:mod:`.signature`), only a record carrying its MAC under that key counts."""
    wanted: dict[str, object] = {"format": RECORD_FORMAT, "manifest_sha256": manifest_sha256, "files": states}
    key = index_key()
    for place in (folder / VERIFIED, cached_record(folder)):
        try:
            record = json.loads(place.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # no record, or a damaged one: only means hashing again
            continue
        if not isinstance(record, dict):
            continue
        found_mac = record.pop("mac", None)
        if record == wanted and (key is None or (isinstance(found_mac, str)
                                                 and hmac.compare_digest(found_mac, record_mac(key, wanted)))):
            return True
    return False


def record_verified(folder: Path, manifest_sha256: str, states: dict[str, list[int]]) -> None:
    """Remember that ``states`` were verified, beside the manifest or, if the folder is read-only,
    in the cache. Failing both only costs the next open a full check, so it is not an error."""
    record: dict[str, object] = {"format": RECORD_FORMAT, "manifest_sha256": manifest_sha256, "files": states}
    key = index_key()
    if key is not None:
        record["mac"] = record_mac(key, record)
    for place in (folder / VERIFIED, cached_record(folder)):
        try:
            write_json(place, record)
            return
        except (WinnowError, OSError):
            continue


def cached_record(folder: Path) -> Path:
    key = hashlib.sha256(str(folder.resolve()).encode("utf-8")).hexdigest()[:32]
    return cache_root() / "verified-indexes" / f"{key}.json"


def forget_verified(folder: Path) -> None:
    """Drop both records, so the next open hashes every file again."""
    for place in (folder / VERIFIED, cached_record(folder)):
        place.unlink(missing_ok=True)

