"""Dense retrieval: inner-product search over passage embeddings, exact or through a faiss ANN index.

The encoder is the index's preset (:mod:`.presets`; all-MiniLM-L6-v2 by default), recorded in
``dense/model.json``: queries are embedded by its query encoder. By default search is exhaustive
(every passage scored: float32 matrix products per batch of queries, top k by ``argpartition``),
which stays well under a millisecond per query for tens of thousands of passages; for millions,
an HNSW or IVF-PQ index (:mod:`.ann`) built into the index answers instead when opened with ``ann``.
``search`` / ``search_many`` return :class:`CandidateList` s whose candidates carry
``StageScore("dense", inner product, rank)``, like :class:`~winnow.index.BM25Index`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
from rich.console import Console
from rich.progress import MofNCompleteColumn, Progress

from ..atomic import remove_stale_siblings, staged_folder
from ..errors import IndexLoadError, WinnowError
from ..lock import output_lock
from ..progress import progress_bar
from ..records import Candidate, CandidateList, Query, StageScore
from .ann import AnnSearcher, AnnSettings, build_ann, file_name
from .embedding_shards import SHARD_ROWS, discard_work, work_folder
from .embeddings import BUILD_DENSE, DENSE_DIR, load_embeddings, read_model_identity, write_dense_folder
from .encoders import DenseEncoder, encoder_for_identity
from .manifest import read_manifest, rebuild_hint, update_manifest, verify_checksums
from .scoring import Hits, highest
from .store import PassageStore
from .vectors import DEFAULT_STORAGE, Storage, inner_products

if TYPE_CHECKING:
    from .ray_encoding import RayEncoding, WorkerRate

# Upper bound on entries of one query-chunk × passage score matrix (16 MB of float32), so a big
# batch over a big corpus is cut into chunks instead of exhausting memory.
SCORE_BUDGET = 4_000_000
# At open, three passages are embedded again and compared with their stored rows: embeddings
# shuffled or taken from another index of the same size are refused (tens of milliseconds).
SPOT_CHECK_MIN_COSINE = 0.99


class DenseIndex:
    """An index's passage embeddings, opened read-only, with the embedder that embeds its queries."""

    name = "dense"  # the stage name on every candidate's StageScore

    def __init__(self, path: Path, manifest: dict[str, Any], embeddings: np.ndarray, passages: PassageStore,
                 embedder: DenseEncoder, *, scales: np.ndarray | None = None, ann: AnnSearcher | None = None) -> None:
        self.path = path
        self.manifest = manifest
        self.embeddings = embeddings
        self.scales = scales  # per-row scales of int8 storage, else None
        self.passages = passages
        self.embedder = embedder
        self.ann = ann
        self._rows = np.arange(len(passages), dtype=np.int64)

    @classmethod
    def open(cls, path: str | Path, *, embedder: DenseEncoder | None = None,
             passages: PassageStore | None = None, ann: str | None = None,
             ann_overrides: dict[str, str | int] | None = None) -> DenseIndex:
        """Open the embeddings of the index folder ``path`` (built with ``winnow index … --dense``).

        ``embedder`` defaults to the query encoder of the preset that made the embeddings (loaded
        afresh); one given must be that model (compared by sha256). ``passages``: this index's
        passages when already read (by ``BM25Index.open`` of the same folder), so a hybrid reads
        them once. ``ann`` ("hnsw" or "ivfpq") searches through that ANN index, which must have been
        built (``--ann``); ``ann_overrides`` changes its search settings (``{"efSearch": 512}``).
        Raises IndexLoadError naming what is wrong, and how to build what is missing.
        """
        path = Path(path)
        manifest = read_manifest(path)  # also checks every listed file's size, the dense ones included
        stored = read_model_identity(path, manifest)
        embedder = embedder or encoder_for_identity(stored)
        current = embedder.identity
        if (stored["sha256"], stored["tokenizer_sha256"]) != (current["sha256"], current["tokenizer_sha256"]):
            raise IndexLoadError(f"the embeddings in {path} were made by {stored['model']} ({stored.get('package')}), "
                                 f"not by the embedder given ({current['model']}, {current['package']}): their "
                                 "vectors are not comparable", BUILD_DENSE)
        embeddings, scales = load_embeddings(path, manifest, embedder.dimensions)
        hint = rebuild_hint(path, manifest)
        if passages is None:
            passages = PassageStore.open(path, manifest["counts"]["passages"], hint)
        if len(passages) != len(embeddings):
            raise IndexLoadError(f"{path} is inconsistent: {len(passages)} passages, {len(embeddings)} embeddings",
                                 hint)
        check_embedding_rows(path, embeddings, scales, passages, embedder)
        searcher = None
        if ann is not None:
            built = manifest["dense"].get("ann", {})
            if ann not in built or f"{DENSE_DIR}/{file_name(ann)}" not in manifest["files"]:
                raise IndexLoadError(f"{path} has no {ann} index",
                                     f"build one: `winnow ann {path} --ann {ann}` (or `winnow index … --ann {ann}`)")
            searcher = AnnSearcher.open(path / DENSE_DIR, built[ann], embeddings, scales, ann_overrides)
        return cls(path, manifest, embeddings, passages, embedder, scales=scales, ann=searcher)

    def verify(self) -> None:
        """Check every file against its recorded sha256 (reads every byte, unlike ``open``'s size checks)."""
        verify_checksums(self.path, self.manifest)

    def __len__(self) -> int:
        return len(self.passages)

    def search(self, query: str | Query, k: int = 10) -> CandidateList:
        """The ``k`` passages most similar to ``query`` (cosine), best first.

        Every passage has a similarity, so the list is ``min(k, len(self))`` long, except for a blank
        query, which gives an empty list (its embedding would be that of [CLS] [SEP]: noise).
        """
        return self.search_many([query], k)[0]

    def search_many(self, queries: Sequence[str | Query], k: int = 10) -> list[CandidateList]:
        """``search`` for each query, embedded and scored in batches (same results, much faster)."""
        if k < 1:
            raise WinnowError(f"k must be at least 1 (got {k})")
        items = [q if isinstance(q, Query) else Query(text=q) for q in queries]
        asked = [i for i, q in enumerate(items) if q.search_text.strip()]
        hits = self.search_vectors(self.embedder.embed_queries([items[i].search_text for i in asked]), k)
        results = [CandidateList(q) for q in items]
        for i, found in zip(asked, hits, strict=True):
            results[i].candidates = [Candidate(self.passages[row], [StageScore(self.name, score, rank)])
                                     for rank, (row, score) in enumerate(
                                         zip(found.rows.tolist(), found.scores.tolist(), strict=True), start=1)]
        return results

    def search_vectors(self, vectors: np.ndarray, k: int) -> list[Hits]:
        """The top ``k`` passage rows by inner product for each row of ``vectors`` ([queries, dimensions]).

        Exact unless opened with ``ann``. Ties are broken by corpus order, as in BM25 search. Each
        query's scores are one row of the product, so a query scores the same alone or in any batch
        up to float rounding in BLAS.
        """
        vectors = np.asarray(vectors, dtype=np.float32)
        if self.ann is not None:
            rows, scores = self.ann.search(vectors, k)
            return [Hits(found[found >= 0], values[found >= 0]) for found, values in zip(rows, scores, strict=True)]
        chunk = max(1, SCORE_BUDGET // max(len(self._rows), 1))
        hits: list[Hits] = []
        for start in range(0, len(vectors), chunk):
            scores = inner_products(vectors[start:start + chunk], self.embeddings, self.scales)
            hits.extend(highest(self._rows, row, k) for row in scores)
        return hits


def add_dense_embeddings(index: str | Path, *, embedder: DenseEncoder | None = None, progress: bool = True,
                         storage: Storage = DEFAULT_STORAGE, shard_rows: int = SHARD_ROWS,
                         ray: RayEncoding | None = None, rates: list[WorkerRate] | None = None) -> dict[str, Any]:
    """Embed the passages of an existing index into its ``dense/`` folder; return the manifest's ``dense`` section.

    ``embedder`` defaults to MiniLM (:func:`.encoders.load_encoder` gives the others). Existing
    embeddings (and ANN indexes) are replaced. The vectors are computed in shards kept beside the
    index (:mod:`.embedding_shards`), so a killed run resumes where it stopped; the new ``dense/``
    is written in a temporary sibling and renamed into place, then the manifest is rewritten (also
    by rename), listing the new files: a killed run leaves the index as it was. The index's lock is
    held throughout, as during a build. With ``ray`` the shards are computed on a Ray cluster
    (:mod:`.ray_encoding`), each worker's rate added to ``rates``; the files are the same.
    """
    from .encoders import load_encoder

    path = Path(index)
    with output_lock(path):
        manifest = read_manifest(path)
        passages = PassageStore.open(path, manifest["counts"]["passages"], rebuild_hint(path, manifest))
        embedder = embedder or load_encoder()
        console = Console(stderr=True)
        for line in remove_stale_siblings(path / DENSE_DIR):
            console.print(line)
        work = work_folder(path)
        with progress_bar(*Progress.get_default_columns(), MofNCompleteColumn(), console=console,
                      transient=True, disable=not progress) as bar, staged_folder(path / DENSE_DIR) as temp:
            task = bar.add_task("embedding passages", total=len(passages))
            dense = write_dense_folder(temp, passages, embedder, progress=lambda n: bar.advance(task, n),
                                       storage=storage, work=work, shard_rows=shard_rows, report=console.print,
                                       ray=ray, rates=rates)
        recorded: dict[str, Any] = update_manifest(path, manifest, replace_files_under=DENSE_DIR, dense=dense)["dense"]
        discard_work(work)
        return recorded


def check_embedding_rows(path: Path, embeddings: np.ndarray, scales: np.ndarray | None, passages: PassageStore,
                         embedder: DenseEncoder) -> None:
    """The first, middle and last passages, embedded now, match their stored rows (cosine ≥ 0.99).

    Shapes alone cannot tell embeddings that were shuffled, or copied from another index of the
    same size, from the right ones; three passages embedded again can, for tens of milliseconds.
    They are embedded by the preset's passage encoder (for two-tower presets this loads it).
    ``scales`` (int8 storage) need not be applied: a per-row scale does not change a cosine.
    """
    count = len(passages)
    rows = sorted({0, count // 2, count - 1}) if count else []
    if not rows:
        return
    fresh = embedder.embed_passages([passages[row] for row in rows])
    for row, vector in zip(rows, fresh, strict=True):
        stored = np.asarray(embeddings[row], dtype=np.float64)
        norms = float(np.linalg.norm(stored) * np.linalg.norm(vector))
        cosine = float(stored @ np.asarray(vector, dtype=np.float64)) / norms if norms else 0.0
        if cosine < SPOT_CHECK_MIN_COSINE:
            raise IndexLoadError(f"{path} is inconsistent: the stored embedding of passage row {row + 1} "
                                 f"({passages[row].id!r}) is not that passage's (cosine {cosine:.3f} with it "
                                 "embedded now)", BUILD_DENSE)


def add_ann_index(index: str | Path, settings: AnnSettings, *, progress: bool = True) -> dict[str, Any]:
    """Build an ANN index (:mod:`.ann`) over an index's embeddings into ``dense/``, listed in the
    manifest; one of the same kind is replaced. Returns its manifest description."""
    path = Path(index)
    with output_lock(path):
        manifest = read_manifest(path)
        identity = read_model_identity(path, manifest)
        embeddings, scales = load_embeddings(path, manifest, int(identity.get("dimensions", 0))
                                             or manifest["dense"]["dimensions"])
        with progress_bar(*Progress.get_default_columns(), MofNCompleteColumn(), console=Console(stderr=True),
                      transient=True, disable=not progress) as bar:
            task = bar.add_task("building the ANN index", total=len(embeddings))
            kind = "hnsw" if type(settings).__name__ == "HnswSettings" else "ivfpq"
            described = build_ann(embeddings, scales, settings, path / DENSE_DIR / file_name(kind),
                                  progress=lambda n: bar.advance(task, n))
        dense = {**manifest["dense"], "ann": {**manifest["dense"].get("ann", {}), kind: described}}
        update_manifest(path, manifest, replace_files_under=DENSE_DIR, dense=dense)
        return described
