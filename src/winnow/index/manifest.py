"""The index manifest: what was indexed, how, and the files that make up the index.

Loading compares the recorded format version and file sizes (cheap, every time); ``verify`` also
compares sha256 checksums (reads every byte).
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import IndexLoadError

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
    """Size and sha256 of every file under ``folder`` (relative names), the manifest excepted."""
    return {
        path.relative_to(folder).as_posix(): {"size": path.stat().st_size, "sha256": file_sha256(path)}
        for path in sorted(folder.rglob("*")) if path.is_file() and path.name != MANIFEST
    }


def write_manifest(folder: Path, **fields: Any) -> dict[str, Any]:
    from .. import __version__

    manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, "winnow_version": __version__,
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), **fields,
                "files": describe_files(folder)}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return manifest


def read_manifest(folder: Path) -> dict[str, Any]:
    """The manifest of ``folder``, after checking format, version and file sizes."""
    if not folder.is_dir():
        raise IndexLoadError(f"no index folder at {folder}", f"build one with `winnow index SOURCE --out {folder}`")
    path = folder / MANIFEST
    if not path.is_file():
        raise IndexLoadError(f"{folder} is not a Winnow index: {MANIFEST} is missing", REBUILD)
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise IndexLoadError(f"{path} is corrupt: {exc}", REBUILD) from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise IndexLoadError(f"{path} is not a Winnow index manifest", REBUILD)
    if manifest.get("format_version") != FORMAT_VERSION:
        raise IndexLoadError(f"{folder} has index format version {manifest.get('format_version')}, this Winnow "
                             f"reads version {FORMAT_VERSION}", REBUILD)
    for name, info in (manifest.get("files") or {}).items():
        file = folder / name
        if not file.is_file():
            raise IndexLoadError(f"{folder} is incomplete: {name} is missing", REBUILD)
        if file.stat().st_size != info["size"]:
            raise IndexLoadError(f"{folder} is corrupt: {name} has {file.stat().st_size} bytes, the manifest "
                                 f"records {info['size']}", REBUILD)
    return manifest


def verify_checksums(folder: Path, manifest: dict[str, Any]) -> None:
    for name, info in manifest["files"].items():
        if file_sha256(folder / name) != info["sha256"]:
            raise IndexLoadError(f"{folder} is corrupt: {name} does not match its recorded sha256", REBUILD)
