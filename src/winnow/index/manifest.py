"""The index manifest: what was indexed, how, and the files that make up the index.

Opening an index checks the manifest's format version, its own checksum (``manifest_sha256``, over
its other fields) and every listed file's size, then every file's sha256: so a flipped byte in any
file is refused, not served. Hashing is done once and then trusted while the files stay unchanged
(see :mod:`.verified`); ``verify_checksums`` re-hashes on demand. Errors name the index's own
``winnow index`` command, so rebuilding is one copy and paste.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

from ..atomic import write_json
from ..errors import IndexLoadError
from ..version import __version__
from .impacts import SCALES
from .signature import SIGNATURE, check_signature, index_key, sign_manifest
from .store_layout import STORE_FILES
from .verified import VERIFIED, file_states, record_verified, was_verified

FORMAT = "winnow-index"
# 2: passages in the memory-mapped store passages/ (1 had passages.jsonl, read whole at every open).
FORMAT_VERSION = 2
MANIFEST = "manifest.json"
REBUILD = "rebuild it with `winnow index SOURCE --out DIR --overwrite`"
SELF_CHECKSUM = "manifest_sha256"
#: bm25s's save format (``BM25.save``): its score matrix (data, indices, indptr), vocabulary and parameters.
BM25S_ARRAYS = ("data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy")
BM25S_VOCABULARY, BM25S_PARAMS = "vocab.index.json", "params.index.json"
BM25_FILES = tuple(f"bm25/{name}" for name in (*BM25S_ARRAYS, BM25S_PARAMS, BM25S_VOCABULARY))
# Every file an index needs must be listed (so checked): dropping a file's entry from the manifest
# must not drop its check. The dense files are required when the manifest has a dense section.
REQUIRED_FILES = (*BM25_FILES, *STORE_FILES)
DENSE_FILES = ("dense/embeddings.npy", "dense/model.json")
SHARD_FILES = ("data.npy", "indices.npy", "indptr.npy")
SCALES_FILE = f"bm25/{SCALES}"


def sharded_bm25_files(bm25: Any) -> list[str]:
    """The BM25 files of a sharded index (:mod:`.shards`): the vocabulary and each shard's arrays."""
    shards = bm25.get("shards") if isinstance(bm25, dict) else None
    count = len(shards) if isinstance(shards, list) else 0
    return ["bm25/vocab.json"] + [f"bm25/shard-{i:04d}/{name}" for i in range(count) for name in SHARD_FILES]


def lucene_files(bm25: dict[str, Any]) -> list[str]:
    """The Lucene files of an index built with ``--bm25-engine lucene`` (:mod:`.lucene_build`): those
    its manifest's bm25 section names (Lucene's file names vary with its segments)."""
    names = bm25.get("lucene_files")
    return [f"lucene/{name}" for name in names if isinstance(name, str)] if isinstance(names, list) else ["lucene/"]


def required_files(manifest: dict[str, Any]) -> list[str]:
    """Every file the index the manifest describes needs."""
    bm25 = manifest.get("bm25")
    if isinstance(bm25, dict) and bm25.get("layout") == "sharded":
        files = [*sharded_bm25_files(bm25), *STORE_FILES]
    elif isinstance(bm25, dict) and bm25.get("layout") == "lucene":
        files = [*lucene_files(bm25), *STORE_FILES]
    else:
        files = list(REQUIRED_FILES)
    if isinstance(bm25, dict) and bm25.get("impacts") == "uint8":
        files.append(SCALES_FILE)  # uint8 impacts are read through their per-term scales (.impacts)
    return files + (list(DENSE_FILES) if "dense" in manifest else [])


def file_sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def describe_files(folder: Path) -> dict[str, dict[str, Any]]:
    """Size and sha256 of every file under ``folder`` (POSIX relative names), the manifest excepted."""
    return {
        path.relative_to(folder).as_posix(): {"size": path.stat().st_size, "sha256": file_sha256(path)}
        for path in sorted(folder.rglob("*")) if path.is_file() and path.name not in (MANIFEST, VERIFIED, SIGNATURE)
    }


def write_manifest(folder: Path, **fields: Any) -> dict[str, Any]:
    """Write ``manifest.json`` last, listing every file already in ``folder``, and record the files
    as verified: their checksums were taken from them just now."""
    states = file_states(folder, [path.relative_to(folder).as_posix() for path in sorted(folder.rglob("*"))
                                  if path.is_file() and path.name != SIGNATURE])
    manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, "winnow_version": __version__,
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), **fields,
                "files": describe_files(folder)}
    save_manifest(folder, manifest)
    if set(states) == set(manifest["files"]) and states == file_states(folder, list(states)):
        record_verified(folder, file_sha256(folder / MANIFEST), states)  # nothing changed while hashing
    return manifest


def save_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    """Write ``manifest`` with its own checksum (whole or not at all)."""
    manifest.pop(SELF_CHECKSUM, None)
    manifest[SELF_CHECKSUM] = manifest_checksum(manifest)
    write_json(folder / MANIFEST, manifest)
    key = index_key()
    if key is not None:  # signed under the key in the environment (see .signature)
        sign_manifest(folder, (folder / MANIFEST).read_bytes(), key)


def manifest_checksum(manifest: dict[str, Any]) -> str:
    """sha256 of the manifest's fields other than its checksum, in a canonical form."""
    fields = {key: value for key, value in manifest.items() if key != SELF_CHECKSUM}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
                          .encode("utf-8")).hexdigest()


def update_manifest(folder: Path, manifest: dict[str, Any], *, replace_files_under: str,
                    **fields: Any) -> dict[str, Any]:
    """Rewrite ``folder``'s manifest with ``fields`` set and the files under ``replace_files_under``
    (a subfolder name) described afresh; the other files keep their recorded sizes and checksums.

    Written whole or not at all, so a reader sees the old manifest or the new one.
    Only the subfolder is re-hashed: re-describing every file would bless any damage done to them
    since the build.
    """
    prefix = replace_files_under.rstrip("/") + "/"
    files = {name: info for name, info in manifest["files"].items() if not name.startswith(prefix)}
    files.update({f"{prefix}{name}": info for name, info in describe_files(folder / prefix).items()})
    updated = {**manifest, **fields, "files": dict(sorted(files.items()))}
    save_manifest(folder, updated)
    return updated


def read_manifest(folder: Path, *, verify: bool = True) -> dict[str, Any]:
    """The manifest of ``folder``, after checking its format, version, own checksum, shape and file
    sizes and, with ``verify``, every file's sha256 (see the module notes)."""
    if folder.is_file():
        raise IndexLoadError(f"{folder} is a file, not an index folder",
                             "pass the folder that `winnow index SOURCE --out DIR` made (the one holding "
                             f"{MANIFEST}){', here ' + str(folder.parent) if folder.name == MANIFEST else ''}")
    if not folder.is_dir():
        raise IndexLoadError(f"no index folder at {folder}", f"build one with `winnow index SOURCE --out {folder}`")
    path = folder / MANIFEST
    if not path.is_file():
        raise IndexLoadError(f"{folder} is not a Winnow index: {MANIFEST} is missing", REBUILD)
    try:
        raw = path.read_bytes()
        manifest = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise IndexLoadError(f"{path} is corrupt: {exc}", REBUILD) from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise IndexLoadError(f"{path} is not a Winnow index manifest (format is not {FORMAT!r})", REBUILD)
    key = index_key()
    if key is not None:  # a signed index is checked wherever the key is known; `serve` may require one
        check_signature(folder, raw, key, required=False)
    if manifest.get("format_version") != FORMAT_VERSION:
        older = (" (version 1 kept its passages in passages.jsonl, read whole into memory at every open; "
                 "re-index it to get the memory-mapped passage store)") if manifest.get("format_version") == 1 else ""
        raise IndexLoadError(f"{folder} has index format version {manifest.get('format_version')!r}; this Winnow "
                             f"reads version {FORMAT_VERSION}{older}", rebuild_hint(folder, manifest))
    # Every version-2 manifest carries its checksum: one without it has been edited, so its list
    # of files (what gets checked) cannot be trusted.
    if SELF_CHECKSUM not in manifest:
        raise IndexLoadError(f"{path} is corrupt: its own checksum ({SELF_CHECKSUM}) is missing, so its list of "
                             "files and their checksums cannot be trusted", rebuild_hint(folder, manifest))
    if manifest[SELF_CHECKSUM] != manifest_checksum(manifest):
        raise IndexLoadError(f"{path} is corrupt: its content does not match its own checksum "
                             f"({SELF_CHECKSUM})", rebuild_hint(folder, manifest))
    check_shape(path, manifest)
    check_required(folder, manifest)
    check_sizes(folder, manifest)
    if verify:
        verify_once(folder, manifest, hashlib.sha256(raw).hexdigest())
    return manifest


def rebuild_hint(folder: Path, manifest: dict[str, Any]) -> str:
    """How to rebuild this index as it was built: its own source and folder when the manifest names the
    source, with the options that shaped it (chunk size, BM25 profile, shard size), then the commands that
    added its embeddings and ANN indexes, so following the hint gives the same index, not another one."""
    source = manifest.get("source")
    if not isinstance(source, str) or not source:
        return REBUILD
    where = shlex.quote(str(folder))
    steps = [f"`winnow index {shlex.quote(source)} --out {where}{_build_flags(manifest)} --overwrite`"]
    dense = manifest.get("dense")
    if isinstance(dense, dict):
        steps.append(f"`winnow embed {where} --encoder {shlex.quote(str(dense.get('preset', 'minilm')))} "
                     f"--dense-storage {shlex.quote(str(dense.get('dtype', 'float16')))}`")
        for kind, described in sorted((dense.get("ann") or {}).items()):
            settings = described.get("settings") if isinstance(described, dict) else None
            assigned = "".join(f" --ann-set {name}={value}" for name, value in (settings or {}).items())
            steps.append(f"`winnow ann {where} --ann {shlex.quote(str(kind))}{assigned}`")
    return "rebuild it with " + ", then ".join(steps)


def _build_flags(manifest: dict[str, Any]) -> str:
    """The `winnow index` flags that shaped this index, where they differ from the defaults."""
    flags = ""
    chunk_words = (manifest.get("source_options") or {}).get("chunk_words")
    if isinstance(chunk_words, int) and chunk_words != 150:
        flags += f" --chunk-words {chunk_words}"
    bm25: dict[str, Any] = manifest["bm25"] if isinstance(manifest.get("bm25"), dict) else {}
    if isinstance(bm25.get("profile"), str) and bm25["profile"] != "default":
        flags += f" --bm25-profile {shlex.quote(bm25['profile'])}"
    if bm25.get("layout") == "lucene":
        flags += " --bm25-engine lucene"
    if bm25.get("layout") == "sharded" and isinstance(bm25.get("shard_size"), int):
        flags += f" --shard-size {bm25['shard_size']}"
    if isinstance(bm25.get("impacts"), str) and bm25["impacts"] != "float32":
        flags += f" --bm25-impacts {shlex.quote(bm25['impacts'])}"
    return flags


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


def check_required(folder: Path, manifest: dict[str, Any]) -> None:
    """Every file the index needs is listed, so it is size-checked and hashed like the others."""
    unlisted = [name for name in required_files(manifest) if name not in manifest["files"]]
    if unlisted:
        raise IndexLoadError(f"{folder / MANIFEST} is corrupt: it does not list {', '.join(unlisted)}, which the "
                             "index needs (an unlisted file would be served unchecked)", rebuild_hint(folder, manifest))


def check_sizes(folder: Path, manifest: dict[str, Any]) -> None:
    for name, info in manifest["files"].items():
        file = folder / name
        if not file.is_file():
            raise IndexLoadError(f"{folder} is incomplete: {name} is missing", rebuild_hint(folder, manifest))
        size = file.stat().st_size
        if size != info["size"]:
            raise IndexLoadError(f"{folder} is corrupt: {name} has {size} bytes, the manifest records "
                                 f"{info['size']}", rebuild_hint(folder, manifest))


def verify_once(folder: Path, manifest: dict[str, Any], manifest_sha256: str) -> None:
    """:func:`verify_checksums`, skipped when a record says these very files were verified before."""
    states = file_states(folder, list(manifest["files"]))
    if was_verified(folder, manifest_sha256, states):
        return
    verify_checksums(folder, manifest)
    record_verified(folder, manifest_sha256, states)


def verify_checksums(folder: Path, manifest: dict[str, Any]) -> None:
    """Hash every listed file; raise IndexLoadError naming each one whose sha256 is not the manifest's."""
    names = list(manifest["files"])
    # hashlib releases the GIL while hashing, so files are hashed side by side on every core.
    with ThreadPoolExecutor(max_workers=max(1, min(len(names), os.cpu_count() or 1))) as pool:
        sums = list(pool.map(lambda name: file_sha256(folder / name), names))
    damaged = [name for name, sha in zip(names, sums, strict=True) if sha != manifest["files"][name]["sha256"]]
    if damaged:
        verb = "does not match its" if len(damaged) == 1 else "do not match their"
        raise IndexLoadError(f"{folder} is corrupt: {', '.join(damaged)} {verb} recorded sha256",
                             rebuild_hint(folder, manifest))


def sign_index(folder: Path, key: bytes) -> dict[str, Any]:
    """Hash every file of the index in ``folder`` against its manifest (no earlier record trusted),
    then sign the manifest under ``key`` (:mod:`.signature`) and record the files as verified under it.
    A signature made with another key is replaced. Returns the manifest."""
    (folder / SIGNATURE).unlink(missing_ok=True)
    manifest = read_manifest(folder, verify=False)
    verify_checksums(folder, manifest)
    raw = (folder / MANIFEST).read_bytes()
    sign_manifest(folder, raw, key)
    record_verified(folder, hashlib.sha256(raw).hexdigest(), file_states(folder, list(manifest["files"])))
    return manifest
