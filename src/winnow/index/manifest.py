"""The index manifest: what was indexed, how, and the files that make up the index.

Opening an index compares the recorded format version and every file's size (cheap, done on every
load: it catches missing and truncated files); ``verify`` also compares sha256 checksums (reads
every byte: it catches same-size corruption such as a flipped byte).
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

from ..errors import IndexLoadError
from .atomic import sibling

FORMAT = "winnow-index"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
REBUILD = "rebuild it with `winnow index SOURCE --out DIR --overwrite`"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def describe_files(folder: Path) -> dict[str, dict[str, Any]]:
    """Size and sha256 of every file under ``folder`` (POSIX relative names), the manifest excepted."""
    return {
        path.relative_to(folder).as_posix(): {"size": path.stat().st_size, "sha256": file_sha256(path)}
        for path in sorted(folder.rglob("*")) if path.is_file() and path.name != MANIFEST
    }


def write_manifest(folder: Path, **fields: Any) -> dict[str, Any]:
    """Write ``manifest.json`` last, listing every file already in ``folder``."""
    from ..version import __version__

    manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, "winnow_version": __version__,
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), **fields,
                "files": describe_files(folder)}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return manifest


def update_manifest(folder: Path, manifest: dict[str, Any], *, replace_files_under: str,
                    **fields: Any) -> dict[str, Any]:
    """Rewrite ``folder``'s manifest with ``fields`` set and the files under ``replace_files_under``
    (a subfolder name) described afresh; the other files keep their recorded sizes and checksums.

    Written to a temporary file and renamed, so a reader sees the old manifest or the new one.
    Only the subfolder is re-hashed: re-describing every file would bless any damage done to them
    since the build.
    """
    prefix = replace_files_under.rstrip("/") + "/"
    files = {name: info for name, info in manifest["files"].items() if not name.startswith(prefix)}
    files.update({f"{prefix}{name}": info for name, info in describe_files(folder / prefix).items()})
    updated = {**manifest, **fields, "files": dict(sorted(files.items()))}
    temp = sibling(folder / MANIFEST, "tmp")
    try:
        temp.write_text(json.dumps(updated, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        os.replace(temp, folder / MANIFEST)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return updated


def read_manifest(folder: Path) -> dict[str, Any]:
    """The manifest of ``folder``, after checking its format, version, shape and file sizes."""
    if not folder.is_dir():
        raise IndexLoadError(f"no index folder at {folder}", f"build one with `winnow index SOURCE --out {folder}`")
    path = folder / MANIFEST
    if not path.is_file():
        raise IndexLoadError(f"{folder} is not a Winnow index: {MANIFEST} is missing", REBUILD)
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise IndexLoadError(f"{path} is corrupt: {exc}", REBUILD) from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise IndexLoadError(f"{path} is not a Winnow index manifest (format is not {FORMAT!r})", REBUILD)
    if manifest.get("format_version") != FORMAT_VERSION:
        raise IndexLoadError(f"{folder} has index format version {manifest.get('format_version')!r}; this Winnow "
                             f"reads version {FORMAT_VERSION}", REBUILD)
    check_shape(path, manifest)
    check_sizes(folder, manifest)
    return manifest


def check_shape(path: Path, manifest: dict[str, Any]) -> None:
    """The fields loading relies on are there and of the right type, so a hand-edited manifest gives
    an IndexLoadError rather than a KeyError deep inside the loader."""
    counts, bm25, files = manifest.get("counts"), manifest.get("bm25"), manifest.get("files")
    problems = []
    if not isinstance(counts, dict) or not isinstance(counts.get("passages"), int):
        problems.append("counts.passages")
    if not isinstance(bm25, dict) or not isinstance(bm25.get("stemmer"), str) or bm25.get("method") != "lucene":
        problems.append("bm25 (method 'lucene' and a stemmer)")
    if not isinstance(files, dict) or not files:
        problems.append("files")
    else:
        for name, info in files.items():
            parts = PurePosixPath(name).parts
            # A listed name must stay inside the folder: no absolute paths, no "..".
            if not parts or PurePosixPath(name).is_absolute() or ".." in parts:
                problems.append(f"files[{name!r}] (not a path inside the index)")
            elif not (isinstance(info, dict) and isinstance(info.get("size"), int)
                      and isinstance(info.get("sha256"), str)):
                problems.append(f"files[{name!r}] (size and sha256)")
    if problems:
        raise IndexLoadError(f"{path} is corrupt: missing or malformed {', '.join(problems)}", REBUILD)


def check_sizes(folder: Path, manifest: dict[str, Any]) -> None:
    for name, info in manifest["files"].items():
        file = folder / name
        if not file.is_file():
            raise IndexLoadError(f"{folder} is incomplete: {name} is missing", REBUILD)
        size = file.stat().st_size
        if size != info["size"]:
            raise IndexLoadError(f"{folder} is corrupt: {name} has {size} bytes, the manifest records "
                                 f"{info['size']}", REBUILD)


def verify_checksums(folder: Path, manifest: dict[str, Any]) -> None:
    """Raise IndexLoadError naming the first file whose sha256 differs from the manifest's."""
    for name, info in manifest["files"].items():
        if file_sha256(folder / name) != info["sha256"]:
            raise IndexLoadError(f"{folder} is corrupt: {name} does not match its recorded sha256", REBUILD)
