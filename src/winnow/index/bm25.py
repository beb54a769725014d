"""An opened BM25 index: Lucene BM25 (k1=0.9, b=0.4, Pyserini's defaults) over title and text.

``BM25Index.open`` checks the folder (manifest, format version, file sizes) before loading anything,
memory-maps bm25s's score arrays and reads the passages. ``search`` answers one query and
``search_many`` a batch in one sparse product (see :mod:`.scoring`); both return
:class:`CandidateList` s whose candidates carry ``StageScore("bm25", score, rank)``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import bm25s

from ..errors import IndexLoadError, WinnowError
from ..records import Candidate, CandidateList, Passage, Query, StageScore
from .analysis import make_stemmer, tokenize_queries
from .build import BM25_DIR, PASSAGES
from .manifest import REBUILD, read_manifest, verify_checksums
from .scoring import TermScoreMatrix


class BM25Index:
    """A built index, opened read-only: ``search`` one query or ``search_many`` in a batch."""

    name = "bm25"  # the stage name on every candidate's StageScore

    def __init__(self, path: Path, manifest: dict[str, Any], model: bm25s.BM25, passages: list[Passage]) -> None:
        self.path = path
        self.manifest = manifest
        self.passages = passages
        self._by_id = {p.id: row for row, p in enumerate(passages)}
        self._stemmer = make_stemmer(manifest["bm25"]["stemmer"])
        scores = model.scores
        self._scorer = TermScoreMatrix(scores["data"], scores["indices"], scores["indptr"], scores["num_docs"],
                                       model.vocab_dict)

    @classmethod
    def open(cls, path: str | Path) -> BM25Index:
        """Open the index folder ``path`` (made by ``winnow index`` or :func:`build_bm25_index`).

        Raises IndexLoadError, naming the folder or file and how to rebuild, if it is missing,
        incomplete, truncated, from another format version, or inconsistent.
        """
        path = Path(path)
        manifest = read_manifest(path)
        try:
            model = bm25s.BM25.load(path / BM25_DIR, mmap=True, show_progress=False)
        except (OSError, ValueError, KeyError, EOFError) as exc:
            raise IndexLoadError(f"{path / BM25_DIR} is corrupt: {exc}", REBUILD) from exc
        passages = read_passages(path / PASSAGES)
        recorded, indexed = manifest["counts"]["passages"], int(model.scores["num_docs"])
        if not len(passages) == recorded == indexed:
            raise IndexLoadError(f"{path} is inconsistent: {len(passages)} passages in {PASSAGES}, {indexed} in "
                                 f"{BM25_DIR}/, {recorded} in the manifest", REBUILD)
        return cls(path, manifest, model, passages)

    def verify(self) -> None:
        """Check every file against its recorded sha256 (reads every byte, unlike ``open``'s size checks)."""
        verify_checksums(self.path, self.manifest)

    def __len__(self) -> int:
        return len(self.passages)

    def get(self, passage_id: str) -> Passage:
        row = self._by_id.get(passage_id)
        if row is None:
            raise WinnowError(f"no passage with id {passage_id!r} in the index {self.path}",
                              "ids are those of the corpus the index was built from")
        return self.passages[row]

    def search(self, query: str | Query, k: int = 10) -> CandidateList:
        """The top ``k`` passages for ``query``, best first; fewer if fewer share a term with it.

        A query of only stop words or terms absent from the corpus gives an empty list.
        """
        return self.search_many([query], k)[0]

    def search_many(self, queries: Sequence[str | Query], k: int = 10) -> list[CandidateList]:
        """``search`` for each query, tokenised and scored as one batch (same results, much faster)."""
        if k < 1:
            raise WinnowError(f"k must be at least 1 (got {k})")
        items = [q if isinstance(q, Query) else Query(text=q) for q in queries]
        hits = self._scorer.top_k(tokenize_queries([q.search_text for q in items], self._stemmer), k)
        return [
            CandidateList(query, [Candidate(self.passages[row], [StageScore(self.name, score, rank)])
                                  for rank, (row, score) in enumerate(
                                      zip(h.rows.tolist(), h.scores.tolist(), strict=True), start=1)])
            for query, h in zip(items, hits, strict=True)
        ]


def read_passages(path: Path) -> list[Passage]:
    """The passages of ``passages.jsonl`` in order; a bad line is an IndexLoadError naming it."""
    passages = []
    try:
        with path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                try:
                    passages.append(Passage.from_dict(json.loads(line)))
                except (ValueError, KeyError, TypeError) as exc:
                    raise IndexLoadError(f"{path}, line {number} is corrupt: {exc!r}", REBUILD) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise IndexLoadError(f"{path} cannot be read: {exc}", REBUILD) from exc
    return passages
