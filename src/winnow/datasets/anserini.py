"""The topics and judgments bundled in Pyserini 0.21.0's Anserini jar, read without Java.

``pyserini==0.21.0`` ships ``pyserini/resources/jars/anserini-0.21.0-fatjar.jar``, a zip archive whose
``topics-and-qrels/`` folder holds the open-domain QA sets DPR evaluated on (Karpukhin et al. 2020,
§4.1), BEIR's test queries and qrels, and the TREC Deep Learning topics and qrels. Later Pyserini
versions download these at run time instead, so the version is pinned. The package is located with
:func:`importlib.util.find_spec` and never imported: only the jar is read, with :mod:`zipfile`.

Each file has its own layout, parsed here strictly (a malformed line is an :class:`InputError` naming
the jar entry and line):

* NQ-open (``topics.nq.*.txt``): ``question<TAB>answers``, the answers a Python list literal. These
  are the untokenised files; ``topics.dpr.nq.*`` hold the same questions after DPR's tokenisation
  ("victoria 's secret").
* TriviaQA (``topics.dpr.trivia.*.txt``): the same two columns with CSV quoting, read with
  :mod:`csv` (an answer list holding a double quote is quoted and its quotes doubled).
* SQuAD-open, WebQuestions, CuratedTREC (``topics.dpr.{squad,wq,curated}.test.txt``): JSON lines
  ``{"question", "answer": [...]}``; CuratedTREC's answers are regular expressions.
* BEIR and TREC DL topics: ``query-id<TAB>text``; their qrels are TREC qrels.
"""

from __future__ import annotations

import ast
import csv
import gzip
import importlib.metadata
import importlib.util
import io
import zipfile
import zlib
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

from ..corpus.json_line import parse_json_line
from ..errors import InputError, WinnowError
from .qa import REGEX, QAItem
from .trec import Qrels, parse_qrels

PACKAGE = "pyserini"
VERSION = "0.21.0"
JAR = Path("resources", "jars", f"anserini-{VERSION}-fatjar.jar")
FOLDER = "topics-and-qrels/"
INSTALL_HINT = f"pip install --no-deps pyserini=={VERSION} (later versions no longer bundle the data)"


def anserini_jar() -> Path:
    """The installed Anserini jar; :class:`WinnowError` if Pyserini 0.21.0 is not installed."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise WinnowError("the bundled benchmark questions need the Python package pyserini", INSTALL_HINT)
    path = Path(spec.submodule_search_locations[0]) / JAR
    if not path.is_file():
        try:
            installed = importlib.metadata.version(PACKAGE)
        except importlib.metadata.PackageNotFoundError:
            installed = "unknown"
        raise WinnowError(f"pyserini {installed} is installed, but {path} is not there", INSTALL_HINT)
    return path


@lru_cache(maxsize=1)
def _open_jar(path: Path) -> zipfile.ZipFile:
    # Opened once per process: reading the central directory of the 150 MB jar is the slow part.
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as error:
        raise WinnowError(f"{path}: not a readable jar ({error})", f"reinstall it: {INSTALL_HINT}") from error


def entry_label(entry: str) -> str:
    """How error messages name a jar entry: ``<jar>!topics-and-qrels/<entry>``."""
    return f"{anserini_jar()}!{FOLDER}{entry}"


def jar_entries() -> list[str]:
    """The file names under ``topics-and-qrels/`` in the jar."""
    jar = _open_jar(anserini_jar())
    return sorted(name[len(FOLDER):] for name in jar.namelist() if name.startswith(FOLDER) and name != FOLDER)


def read_entry(entry: str) -> str:
    """The text of ``topics-and-qrels/<entry>``, gzip-decompressed if its name ends in ``.gz``."""
    jar = _open_jar(anserini_jar())
    try:
        data = jar.read(FOLDER + entry)
    except KeyError as error:
        raise WinnowError(f"{entry_label(entry)}: no such entry in the jar", f"reinstall it: {INSTALL_HINT}") from error
    try:
        if entry.endswith(".gz"):
            data = gzip.decompress(data)
        return data.decode("utf-8")
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as error:
        raise InputError(entry_label(entry), f"cannot be read ({error})",
                         hint=f"reinstall it: {INSTALL_HINT}") from error


def numbered_lines(text: str) -> Iterator[tuple[int, str]]:
    # Split on "\n" only: str.splitlines would also split inside TriviaQA questions that hold U+2028.
    for number, line in enumerate(text.split("\n"), start=1):
        yield number, line.rstrip("\r")


def parse_python_list_tsv(text: str, label: str) -> Iterator[tuple[int, str, list[str]]]:
    """NQ-open: ``question<TAB>['answer', ...]`` per line → (line, question, answers)."""
    for line, row in numbered_lines(text):
        if not row.strip():
            continue
        fields = row.split("\t")
        if len(fields) != 2:
            raise InputError(label, f"expected 2 tab-separated fields, got {len(fields)}", line=line)
        yield line, fields[0], _answer_list(fields[1], label, line)


def parse_csv_tsv(text: str, label: str) -> Iterator[tuple[int, str, list[str]]]:
    """TriviaQA: the same columns as NQ-open, with CSV quoting."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t")
    try:
        for fields in reader:
            if not fields:
                continue
            if len(fields) != 2:
                raise InputError(label, f"expected 2 tab-separated fields, got {len(fields)}", line=reader.line_num)
            yield reader.line_num, fields[0], _answer_list(fields[1], label, reader.line_num)
    except csv.Error as error:
        raise InputError(label, f"not valid CSV: {error}", line=reader.line_num) from error


def parse_json_lines(text: str, label: str) -> Iterator[tuple[int, str, list[str]]]:
    """SQuAD-open, WebQuestions, CuratedTREC: ``{"question": ..., "answer": [...]}`` per line."""
    for line, row in numbered_lines(text):
        if not row.strip():
            continue
        record = parse_json_line(row, label, line, hint='each line must be {"question": "...", "answer": [...]}')
        if not isinstance(record, dict) or not isinstance(record.get("question"), str):
            raise InputError(label, 'expected {"question": "...", "answer": [...]}', line=line, field="question")
        yield line, record["question"], _checked_answers(record.get("answer"), label, line)


def _answer_list(literal: str, label: str, line: int) -> list[str]:
    try:
        # literal_eval reads Python literals only (never runs code): the files write lists with repr().
        value = ast.literal_eval(literal)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as error:
        raise InputError(label, f"answers are not a Python list literal: {literal[:80]!r}", line=line,
                         field="answers") from error
    return _checked_answers(value, label, line)


def _checked_answers(value: object, label: str, line: int) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(answer, str) and answer.strip() for answer in value):
        raise InputError(label, "answers must be a list of non-empty strings", line=line, field="answers")
    return value


PARSERS = {"python-list": parse_python_list_tsv, "csv": parse_csv_tsv, "json": parse_json_lines}


def load_qa_entry(entry: str, layout: str, dataset: str, *, regex: bool = False) -> list[QAItem]:
    """The questions of a QA jar entry as :class:`QAItem` records with ids ``<dataset>-<n>`` (0-based,
    in file order) and ``metadata = {"dataset": ...}`` (plus ``"answer_type": "regex"``)."""
    label = entry_label(entry)
    items: list[QAItem] = []
    for _line, question, answers in PARSERS[layout](read_entry(entry), label):
        metadata = {"dataset": dataset, **({"answer_type": REGEX} if regex else {})}
        items.append(QAItem(f"{dataset}-{len(items)}", question, answers, metadata))
    return items


def load_topics_entry(entry: str) -> dict[str, str]:
    """Query id → text from a ``query-id<TAB>text`` jar entry (BEIR and TREC DL topics)."""
    label = entry_label(entry)
    topics: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for line, row in numbered_lines(read_entry(entry)):
        if not row.strip():
            continue
        query_id, tab, query = row.partition("\t")
        if not tab or not query_id.strip() or not query.strip():
            raise InputError(label, "expected query-id <tab> text", line=line)
        if query_id in topics:
            raise InputError(label, f"duplicate query id {query_id!r} (first at line {first_line[query_id]})",
                             line=line, field="query-id")
        topics[query_id] = query.strip()
        first_line[query_id] = line
    return topics


def load_qrels_entry(entry: str) -> Qrels:
    """The TREC qrels of a jar entry."""
    return parse_qrels(numbered_lines(read_entry(entry)), entry_label(entry))
