"""Lucene BM25 as a first stage (``--retriever lucene``): Pyserini's searcher, Winnow's candidates.

RRR's first stage is Pyserini's BM25 (Glass et al. 2022 cite it for their retriever), and the
papers' baselines are Pyserini runs; Winnow's own BM25 (:mod:`.bm25`, the ``pyserini`` profile)
comes close but is not Lucene (its tokeniser and Lucene's lossy length norm differ:
docs/benchmarks.md). This stage is Lucene itself: Anserini's ``SimpleSearcher``, the Java object
Pyserini's ``LuceneSearcher`` wraps and calls the same way (``search(q, k)`` for one query,
``batch_search`` on Java threads for several), BM25 with the index's k1 and b (0.9 and 0.4, Pyserini's
defaults). Its results are Pyserini's to the bit: the same ids in the same order with the same scores
(tests/test_lucene.py), recorded as ``StageScore("lucene", score, rank)``.

Three kinds of index can be opened:

* a Winnow index built with ``winnow index --bm25-engine lucene`` (:mod:`.lucene_build`): the manifest
  and the passage store are checked as for any Winnow index (every file's sha256, once, then
  trusted while unchanged: :mod:`.verified`), then Lucene's document count against the store's and
  a few passages' ids against Lucene's;
* ``pyserini:NAME``, one of Pyserini's prebuilt Lucene indexes (``msmarco-v1-passage``,
  ``wikipedia-dpr-100w``, BEIR's ``beir-v1.0.0-*.flat``), downloaded once by Pyserini into its cache
  (its md5 checked) and read from there offline; the passages' text is Lucene's stored raw document;
* a Lucene index folder built by Pyserini or Anserini with ``-storeRaw``, its text read the same way.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
from pathlib import Path
from typing import Any, Sequence

from ..cores import available_cores
from ..errors import IndexLoadError, WinnowError
from ..records import Candidate, CandidateList, Passage, Query, StageScore
from .lucene_build import K1, LAYOUT, LUCENE_DIR, B
from .lucene_jvm import anserini
from .manifest import MANIFEST, read_manifest, rebuild_hint, verify_checksums
from .store import PassagesById, PassageStore

PREBUILT = "pyserini:"
FEATURE = "--retriever lucene"
BUILD_ONE = "build one with `winnow index SOURCE --out DIR --bm25-engine lucene`"


class LuceneIndex(PassagesById):
    """A Lucene index opened for search: ``search`` one query, ``search_many`` a batch."""

    name = "lucene"  # the stage name on every candidate's StageScore

    def __init__(self, path: Path, searcher: Any, passages: PassageStore | StoredPassages, *,
                 manifest: dict[str, Any] | None = None, threads: int | None = None) -> None:
        self.path = path
        self.manifest = manifest or {}
        self.passages = passages
        self._searcher = searcher
        self._autoclass = anserini(FEATURE)
        self.threads = threads or available_cores()

    @classmethod
    def open(cls, path: str | Path) -> LuceneIndex:
        """Open a Winnow index built with ``--bm25-engine lucene``, ``pyserini:NAME`` (a prebuilt index)
        or a Lucene index folder of Pyserini's; :class:`WinnowError` (``IndexLoadError`` for a damaged
        folder) naming what is wrong, never a Java traceback."""
        text = str(path)
        if text.startswith(PREBUILT):
            return cls.of_lucene_folder(prebuilt_folder(text[len(PREBUILT):]), label=text)
        path = Path(path)
        if path.is_dir() and not (path / MANIFEST).exists() and any(path.glob("segments_*")):
            return cls.of_lucene_folder(path, label=str(path))
        manifest = read_manifest(path)
        hint = rebuild_hint(path, manifest)
        bm25 = manifest["bm25"]
        if bm25.get("layout") != LAYOUT:
            raise WinnowError(f"{FEATURE}: {path} holds Winnow's own BM25, not a Lucene index",
                              f"search it with --retriever bm25, or {BUILD_ONE}")
        rows = manifest["counts"]["passages"]
        passages = PassageStore.open(path, rows, hint)
        searcher = open_searcher(path / LUCENE_DIR, hint)
        searcher.set_bm25(float(bm25.get("k1", K1)), float(bm25.get("b", B)))
        check_documents(path, searcher, passages, hint)
        return cls(path, searcher, passages, manifest=manifest)

    @classmethod
    def of_lucene_folder(cls, folder: Path, *, label: str) -> LuceneIndex:
        """A Lucene index of Pyserini's (no Winnow manifest: Lucene's own checks, the stored text)."""
        searcher = open_searcher(folder, f"check {label}")
        return cls(folder, searcher, StoredPassages(searcher, label))

    def verify(self) -> None:
        """Check every file against its recorded sha256 (a Winnow-built index; Pyserini's have no manifest)."""
        if self.manifest:
            verify_checksums(self.path, self.manifest)


    def search(self, query: str | Query, k: int = 10) -> CandidateList:
        """The top ``k`` passages for ``query`` by Lucene's BM25, best first (``SimpleSearcher.search``)."""
        return self.search_many([query], k)[0]

    def search_many(self, queries: Sequence[str | Query], k: int = 10) -> list[CandidateList]:
        """``search`` for each query; several are searched by Lucene's ``batch_search`` on
        ``threads`` Java threads (the same hits as one by one)."""
        if k < 1:
            raise WinnowError(f"k must be at least 1 (got {k})")
        items = [q if isinstance(q, Query) else Query(text=q) for q in queries]
        texts = [q.search_text for q in items]
        if len(texts) == 1:
            results = [self._searcher.search(texts[0], k)]
        else:
            array = self._autoclass("java.util.ArrayList")
            asked, keys = array(), array()
            for i, text in enumerate(texts):
                asked.add(text)
                keys.add(str(i))
            found = self._searcher.batch_search(asked, keys, k, self.threads)
            results = [found.get(str(i)) for i in range(len(texts))]
        return [CandidateList(query, [Candidate(self._passage(hit.docid), [StageScore(self.name, hit.score, rank)])
                                      for rank, hit in enumerate(hits or [], start=1)])
                for query, hits in zip(items, results, strict=True)]

    def _passage(self, passage_id: str) -> Passage:
        passage = self.passages.get(passage_id)
        if passage is None:
            raise IndexLoadError(f"{self.path} is inconsistent: Lucene found {passage_id!r}, which the passage "
                                 "store lacks", rebuild_hint(self.path, self.manifest) if self.manifest else BUILD_ONE)
        return passage


def open_searcher(folder: Path, hint: str) -> Any:
    """Anserini's ``SimpleSearcher`` over the Lucene index in ``folder`` (BM25, k1=0.9, b=0.4)."""
    autoclass = anserini(FEATURE)
    from jnius import JavaException

    try:
        return autoclass("io.anserini.search.SimpleSearcher")(str(folder))
    except JavaException as error:
        first = (str(error).splitlines() or [type(error).__name__])[0]
        raise IndexLoadError(f"{folder} is not a readable Lucene index: {first}", hint) from error


def check_documents(path: Path, searcher: Any, passages: PassageStore, hint: str) -> None:
    """Lucene holds as many documents as the store, and the first, middle and last passages by id:
    a Lucene folder from another index, even one resealed into the manifest, is refused."""
    count = int(searcher.get_total_num_docs())
    if count != len(passages):
        raise IndexLoadError(f"{path} is inconsistent: {len(passages)} passages in the store and the manifest, "
                             f"{count} documents in {LUCENE_DIR}/", hint)
    for row in sorted({0, count // 2, count - 1}) if count else []:
        if searcher.doc(passages[row].id) is None:
            raise IndexLoadError(f"{path} is inconsistent: passage row {row + 1} ({passages[row].id!r}) is not in "
                                 f"{LUCENE_DIR}/", hint)


class StoredPassages:
    """The passages of a Lucene index of Pyserini's, read from Lucene's stored raw documents
    (JSON ``{"id", "contents"}`` or BEIR's ``{"_id", "title", "text"}``; else the text as it is)."""

    def __init__(self, searcher: Any, label: str) -> None:
        self._searcher = searcher
        self.label = label

    def __len__(self) -> int:
        return int(self._searcher.get_total_num_docs())

    def get(self, passage_id: str) -> Passage | None:
        raw = self._searcher.doc_raw(passage_id)
        if raw is None:
            if self._searcher.doc(passage_id) is None:
                return None
            raw = self._searcher.doc_contents(passage_id)
        if raw is None:
            raise WinnowError(f"{self.label} stores no text for its documents ({passage_id!r}): Winnow's "
                              "stages read the passages' text",
                              f"index the corpus with Anserini's -storeRaw, or {BUILD_ONE}")
        return passage_of(passage_id, raw)


def passage_of(passage_id: str, raw: str) -> Passage:
    """A stored document as a passage: the text of its JSON ``contents`` or ``text`` (with ``title``)."""
    try:
        record = json.loads(raw)
    except ValueError:
        return Passage(passage_id, raw)
    if not isinstance(record, dict):
        return Passage(passage_id, raw)
    text = record.get("text") if isinstance(record.get("text"), str) else record.get("contents")
    title = record.get("title")
    return Passage(passage_id, text if isinstance(text, str) else raw, title if isinstance(title, str) else "")


def prebuilt_folder(name: str) -> Path:
    """Pyserini's prebuilt Lucene index ``name``, downloaded into Pyserini's cache (md5 checked) the
    first time and found there after, offline too; one line when it is unknown or cannot be fetched."""
    anserini(FEATURE)  # Java and the extra first: a prebuilt index is no use without them
    try:
        util = importlib.import_module("pyserini.util")
    except ImportError as error:
        raise WinnowError(f"--index {PREBUILT}{name}: Pyserini's download code cannot be imported ({error})",
                          "pip install pandas tqdm (what pyserini.util imports)") from error
    known = util.TF_INDEX_INFO
    if name not in known:
        raise WinnowError(f"--index {PREBUILT}{name}: Pyserini has no prebuilt Lucene index of that name",
                          "e.g. pyserini:msmarco-v1-passage, pyserini:wikipedia-dpr-100w or "
                          "pyserini:beir-v1.0.0-nfcorpus.flat; pyserini.prebuilt_index_info.TF_INDEX_INFO lists them")
    size = known[name].get("size compressed (bytes)")
    # Pyserini prints its progress and URL failures on stdout, where `--json` output goes.
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            return Path(util.download_prebuilt_index(name, verbose=False))
        except (ValueError, OSError) as error:
            problem = str(error).splitlines()[0] if str(error) else type(error).__name__
    shown = f"{size / 1e6:,.0f} MB; " if isinstance(size, int) else ""
    raise WinnowError(f"--index {PREBUILT}{name}: Pyserini's prebuilt index is not in its cache and could not be "
                      f"downloaded ({shown}{problem})",
                      f"it is downloaded once and then kept in ~/.cache/pyserini/indexes: connect to the internet, "
                      f"or {BUILD_ONE}")


def lucene_identity(index: str | Path) -> dict[str, Any] | None:
    """What a run searched when it is not a Winnow index (``pyserini:NAME``, a folder of Pyserini's):
    its name and, for a prebuilt one, Pyserini's md5 of it; None for a Winnow index (its manifest says)."""
    text = str(index)
    if text.startswith(PREBUILT):
        name = text[len(PREBUILT):]
        info = importlib.import_module("pyserini.prebuilt_index_info").TF_INDEX_INFO.get(name, {})
        return {"lucene": {"prebuilt": name, "md5": info.get("md5")}}
    if not (Path(index) / MANIFEST).exists():
        return {"lucene": {"folder": Path(index).name}}
    return None
