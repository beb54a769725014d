"""The BM25 index: Lucene BM25 (k1=0.9, b=0.4, Pyserini's defaults) over title and text, via bm25s.

English stop words and the Snowball English stemmer, applied alike to passages and queries. The
folder holds bm25s's sparse arrays (memory-mapped on load) in ``bm25/``, the passages in corpus order
in ``passages.jsonl`` (row i is bm25s document i) and ``manifest.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import bm25s
import numpy as np
import Stemmer
from rich.progress import Progress

from ..errors import IndexLoadError, WinnowError
from ..records import Candidate, CandidateList, Passage, Query, StageScore
from .atomic import atomic_folder
from .manifest import REBUILD, read_manifest, verify_checksums, write_manifest

STOPWORDS = "en"
STEMMER = "english"
PASSAGES = "passages.jsonl"
BM25_DIR = "bm25"


def indexed_text(passage: Passage) -> str:
    return f"{passage.title}\n{passage.text}" if passage.title else passage.text


def _tokenize(texts: list[str], stemmer: Stemmer.Stemmer, *, return_ids: bool) -> Any:
    return bm25s.tokenize(texts, stopwords=STOPWORDS, stemmer=stemmer, return_ids=return_ids, show_progress=False)


def build_bm25_index(passages: Sequence[Passage], out: str | Path, *, source: str, source_checksum: str,
                     load_report: dict[str, Any] | None = None, source_options: dict[str, Any] | None = None,
                     k1: float = 0.9, b: float = 0.4, overwrite: bool = False, progress: bool = True) -> Path:
    """Index ``passages`` into the folder ``out``, atomically (see :func:`atomic_folder`)."""
    if not passages:
        raise WinnowError("there are no passages to index")
    out = Path(out)
    stemmer = Stemmer.Stemmer(STEMMER)
    with Progress(transient=True, disable=not progress) as bar, atomic_folder(out, overwrite=overwrite) as temp:
        task = bar.add_task("tokenising", total=4)
        tokens = _tokenize([indexed_text(p) for p in passages], stemmer, return_ids=True)
        bar.update(task, advance=1, description="indexing")
        model = bm25s.BM25(method="lucene", k1=k1, b=b)
        model.index(tokens, show_progress=False)
        bar.update(task, advance=1, description="saving")
        model.save(temp / BM25_DIR, show_progress=False)
        with (temp / PASSAGES).open("w", encoding="utf-8") as handle:
            for passage in passages:
                handle.write(json.dumps(passage.to_dict(), ensure_ascii=False) + "\n")
        bar.update(task, advance=1, description="checksumming")
        write_manifest(
            temp, source=source, source_checksum=source_checksum, source_options=source_options or {},
            counts={"passages": len(passages), "vocabulary": len(tokens.vocab),
                    "tokens": int(sum(len(ids) for ids in tokens.ids))},
            bm25={"method": "lucene", "k1": k1, "b": b, "stopwords": STOPWORDS, "stemmer": f"snowball-{STEMMER}",
                  "fields": ["title", "text"], "library": f"bm25s {bm25s.__version__}"},
            load_report=load_report or {})
        bar.update(task, advance=1)
    return out


class BM25Index:
    """A built index, opened read-only: ``search`` one query or ``search_many`` in a batch."""

    name = "bm25"

    def __init__(self, path: Path, manifest: dict[str, Any], model: bm25s.BM25, passages: list[Passage]) -> None:
        self.path = path
        self.manifest = manifest
        self._model = model
        self.passages = passages
        self._by_id = {p.id: i for i, p in enumerate(passages)}
        self._stemmer = Stemmer.Stemmer(manifest["bm25"]["stemmer"].removeprefix("snowball-"))

    @classmethod
    def open(cls, path: str | Path) -> BM25Index:
        path = Path(path)
        manifest = read_manifest(path)
        try:
            model = bm25s.BM25.load(path / BM25_DIR, mmap=True, show_progress=False)
            with (path / PASSAGES).open(encoding="utf-8") as handle:
                passages = [Passage.from_dict(json.loads(line)) for line in handle]
        except (OSError, ValueError, KeyError) as exc:
            raise IndexLoadError(f"{path} is corrupt: {exc}", REBUILD) from exc
        if len(passages) != manifest["counts"]["passages"]:
            raise IndexLoadError(f"{path} is corrupt: {len(passages)} passages stored, "
                                 f"{manifest['counts']['passages']} recorded", REBUILD)
        return cls(path, manifest, model, passages)

    def verify(self) -> None:
        """Check every file against its recorded sha256 (slower than the size checks ``open`` does)."""
        verify_checksums(self.path, self.manifest)

    def __len__(self) -> int:
        return len(self.passages)

    def get(self, passage_id: str) -> Passage:
        if passage_id not in self._by_id:
            raise WinnowError(f"no passage with id {passage_id!r} in {self.path}")
        return self.passages[self._by_id[passage_id]]

    def _query_tokens(self, texts: list[str]) -> list[list[str]]:
        vocabulary = self._model.vocab_dict
        return [[t for t in tokens if t in vocabulary]
                for tokens in _tokenize(texts, self._stemmer, return_ids=False)]

    def _top(self, query: Query, tokens: list[str], k: int) -> CandidateList:
        if not tokens:  # only stop words or unknown terms: nothing matches
            return CandidateList(query, [])
        scores = self._model.get_scores(tokens)
        k = min(k, len(scores))
        top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        # Highest score first; ties broken by corpus order so results are reproducible.
        top = top[np.lexsort((top, -scores[top]))]
        top = top[scores[top] > 0]  # a zero score means no query term occurs: not retrieved
        return CandidateList(query, [
            Candidate(self.passages[i], [StageScore(self.name, float(scores[i]), rank)])
            for rank, i in enumerate(top.tolist(), start=1)])

    def search(self, query: str | Query, k: int = 10) -> CandidateList:
        return self.search_many([query], k)[0]

    def search_many(self, queries: Sequence[str | Query], k: int = 10) -> list[CandidateList]:
        if k < 1:
            raise WinnowError(f"k must be at least 1 (got {k})")
        items = [q if isinstance(q, Query) else Query(text=q) for q in queries]
        tokens = self._query_tokens([q.text for q in items])
        return [self._top(q, t, k) for q, t in zip(items, tokens)]
