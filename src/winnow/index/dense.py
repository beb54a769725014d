"""Dense retrieval: exact inner-product search over all-MiniLM-L6-v2 passage embeddings.

Embeddings are unit length, so the inner product is the cosine similarity. Search is exhaustive
(every passage is scored: one float32 matrix product per batch of queries, top k by
``argpartition``), which on a laptop stays well under a millisecond per query for corpora of tens
of thousands of passages and needs no approximate index whose recall would then have to be checked.
``search`` / ``search_many`` return :class:`CandidateList` s whose candidates carry
``StageScore("dense", cosine, rank)``, like :class:`~winnow.index.BM25Index`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
from rich.console import Console
from rich.progress import MofNCompleteColumn, Progress

from ..atomic import remove_stale_siblings, staged_folder
from ..errors import IndexLoadError, WinnowError
from ..lock import output_lock
from ..records import Candidate, CandidateList, Query, StageScore
from .analysis import indexed_text
from .embedder import Embedder, load_embedder
from .embeddings import BUILD_DENSE, DENSE_DIR, load_embeddings, read_model_identity, write_dense_folder
from .manifest import read_manifest, rebuild_hint, update_manifest, verify_checksums
from .scoring import Hits, highest
from .store import PassageStore

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
                 embedder: Embedder) -> None:
        self.path = path
        self.manifest = manifest
        self.embeddings = embeddings
        self.passages = passages
        self.embedder = embedder
        self._rows = np.arange(len(passages), dtype=np.int64)

    @classmethod
    def open(cls, path: str | Path, *, embedder: Embedder | None = None,
             passages: PassageStore | None = None) -> DenseIndex:
        """Open the embeddings of the index folder ``path`` (built with ``winnow index … --dense``).

        ``embedder`` defaults to all-MiniLM-L6-v2 loaded afresh; it must be the model that made the
        embeddings (compared by sha256). ``passages``: this index's passages when already read (by
        ``BM25Index.open`` of the same folder), so a hybrid reads them once. Raises IndexLoadError
        naming what is wrong, and how to build embeddings if there are none.
        """
        path = Path(path)
        manifest = read_manifest(path)  # also checks every listed file's size, the dense ones included
        stored = read_model_identity(path, manifest)
        embedder = embedder or load_embedder()
        current = embedder.identity
        if (stored["sha256"], stored["tokenizer_sha256"]) != (current["sha256"], current["tokenizer_sha256"]):
            raise IndexLoadError(f"the embeddings in {path} were made by {stored['model']} ({stored.get('package')}), "
                                 f"not by the embedder given ({current['model']}, {current['package']}): their "
                                 "vectors are not comparable", BUILD_DENSE)
        embeddings = load_embeddings(path, manifest, embedder.dimensions)
        hint = rebuild_hint(path, manifest)
        if passages is None:
            passages = PassageStore.open(path, manifest["counts"]["passages"], hint)
        if len(passages) != len(embeddings):
            raise IndexLoadError(f"{path} is inconsistent: {len(passages)} passages, {len(embeddings)} embeddings",
                                 hint)
        check_embedding_rows(path, embeddings, passages, embedder)
        return cls(path, manifest, embeddings, passages, embedder)

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
        hits = self.search_vectors(self.embedder.embed([items[i].search_text for i in asked]), k)
        results = [CandidateList(q) for q in items]
        for i, found in zip(asked, hits, strict=True):
            results[i].candidates = [Candidate(self.passages[row], [StageScore(self.name, score, rank)])
                                     for rank, (row, score) in enumerate(
                                         zip(found.rows.tolist(), found.scores.tolist(), strict=True), start=1)]
        return results

    def search_vectors(self, vectors: np.ndarray, k: int) -> list[Hits]:
        """The top ``k`` passage rows by inner product for each row of ``vectors`` ([queries, 384]).

        Ties are broken by corpus order, as in BM25 search. Each query's scores are one row of the
        product, so a query scores the same alone or in any batch up to float rounding in BLAS.
        """
        vectors = np.asarray(vectors, dtype=self.embeddings.dtype)
        chunk = max(1, SCORE_BUDGET // max(len(self._rows), 1))
        hits: list[Hits] = []
        for start in range(0, len(vectors), chunk):
            scores = vectors[start:start + chunk] @ self.embeddings.T
            hits.extend(highest(self._rows, row, k) for row in scores)
        return hits


def add_dense_embeddings(index: str | Path, *, embedder: Embedder | None = None,
                         progress: bool = True) -> dict[str, Any]:
    """Embed the passages of an existing index into its ``dense/`` folder; return the manifest's ``dense`` section.

    Existing embeddings are replaced. The new ``dense/`` is written in a temporary sibling and
    renamed into place, then the manifest is rewritten (also by rename), listing the new files:
    a killed run leaves the index as it was, at worst with a hidden ``.dense.tmp-*`` folder, which
    the next run removes. The index's lock is held throughout, as during a build.
    """
    path = Path(index)
    with output_lock(path):
        manifest = read_manifest(path)
        passages = PassageStore.open(path, manifest["counts"]["passages"], rebuild_hint(path, manifest))
        embedder = embedder or load_embedder()
        console = Console(stderr=True)
        for line in remove_stale_siblings(path / DENSE_DIR):
            console.print(line)
        with Progress(*Progress.get_default_columns(), MofNCompleteColumn(), console=console,
                      transient=True, disable=not progress) as bar, staged_folder(path / DENSE_DIR) as temp:
            task = bar.add_task("embedding passages", total=len(passages))
            dense = write_dense_folder(temp, passages, embedder, progress=lambda n: bar.advance(task, n))
        recorded: dict[str, Any] = update_manifest(path, manifest, replace_files_under=DENSE_DIR, dense=dense)["dense"]
        return recorded


def check_embedding_rows(path: Path, embeddings: np.ndarray, passages: PassageStore, embedder: Embedder) -> None:
    """The first, middle and last passages, embedded now, match their stored rows (cosine ≥ 0.99).

    Shapes alone cannot tell embeddings that were shuffled, or copied from another index of the
    same size, from the right ones; three passages embedded again can, for tens of milliseconds.
    """
    count = len(passages)
    rows = sorted({0, count // 2, count - 1}) if count else []
    if not rows:
        return
    fresh = embedder.embed([indexed_text(passages[row]) for row in rows])
    for row, vector in zip(rows, fresh, strict=True):
        stored = np.asarray(embeddings[row], dtype=np.float64)
        norms = float(np.linalg.norm(stored) * np.linalg.norm(vector))
        cosine = float(stored @ np.asarray(vector, dtype=np.float64)) / norms if norms else 0.0
        if cosine < SPOT_CHECK_MIN_COSINE:
            raise IndexLoadError(f"{path} is inconsistent: the stored embedding of passage row {row + 1} "
                                 f"({passages[row].id!r}) is not that passage's (cosine {cosine:.3f} with it "
                                 "embedded now)", BUILD_DENSE)
