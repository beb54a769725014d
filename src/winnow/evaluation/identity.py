"""A run's identity: what decides its answers, recorded in ``config.json`` so that resuming with
anything else is refused (:meth:`~winnow.evaluation.runfolder.RunFolder.open`). What was indexed
and how counts, not where nor when: moving or rebuilding the same index is fine."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..index.manifest import file_sha256
from .answering import first_stage_depth
from .labels import resolved_settings

if TYPE_CHECKING:
    from ..datasets.qa import QAItem
    from ..run_spec import RunSpec


def run_identity(spec: RunSpec, queries: Path, items: Sequence[QAItem], index_dir: Path,
                 seed: int | None) -> dict[str, Any]:
    """The run's identity: its spec and resolved settings, the question file, the index, the seed
    and the depth of the first stage it keeps."""
    return {
        "spec": {key: value for key, value in spec.to_dict().items() if key != "settings"},
        "settings": resolved_settings(spec),
        "queries": {"sha256": file_sha256(Path(queries)), "questions": len(items)},
        "index": index_identity(index_dir, spec.retriever, spec.ann),
        "seed": seed,
        "first_stage_depth": first_stage_depth(spec),
    }


def index_identity(index_dir: Path, retriever: str, ann: str = "") -> dict[str, Any]:
    """What was indexed and how (not where, nor when): moving or rebuilding the same index is fine.
    Of the ANN indexes only the one searched (``ann``) counts: building another does not change a run."""
    from ..index.ann import ANN_KINDS, file_name
    from ..index.manifest import read_manifest

    if retriever == "lucene":
        from ..index.lucene import lucene_identity

        other = lucene_identity(index_dir)  # a prebuilt index of Pyserini's, or a Lucene folder of its
        if other is not None:
            return other
    manifest = read_manifest(Path(index_dir))
    identity = {key: manifest.get(key) for key in ("source_checksum", "source_options", "counts", "bm25")}
    if isinstance(identity["bm25"], dict) and "lucene_files" in identity["bm25"]:
        # Lucene's segments (their files) depend on its indexing threads' timing, its results do not.
        identity["bm25"] = {key: value for key, value in identity["bm25"].items() if key != "lucene_files"}
    unused = {f"dense/{file_name(kind)}" for kind in ANN_KINDS if kind != ann}
    if retriever in ("dense", "hybrid"):
        identity["dense"] = {name: entry.get("sha256") for name, entry in (manifest.get("files") or {}).items()
                             if name.startswith("dense/") and name not in unused}
    return identity
