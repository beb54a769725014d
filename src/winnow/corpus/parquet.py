"""Parquet corpora: how Hugging Face datasets ship collections (e.g. BEIR's and MS MARCO's corpora).

Columns: the id in ``id`` (or ``_id``, BEIR's name), the text in ``text`` (or ``contents``, Pyserini's
name), and an optional ``title``; other columns are ignored. Ids may be strings or integers. The
file is read in record batches (a few thousand rows at a time), never whole, through pyarrow (the
``parquet`` extra). A row whose id is missing or whose text is not a string stops the load with an
:class:`InputError` naming the file, row and column.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..extras import import_extra
from ..records import Passage
from .meter import Meter
from .report import Location

PARQUET_SUFFIXES = (".parquet",)
ID_COLUMNS = ("id", "_id")
TEXT_COLUMNS = ("text", "contents")
BATCH_ROWS = 4096
COLUMNS_HINT = "a Parquet corpus needs an id column (id or _id), a text column (text or contents), and may have title"


def is_parquet(path: Path) -> bool:
    return path.name.lower().endswith(PARQUET_SUFFIXES)


def open_parquet(path: Path) -> Any:
    """The ``pyarrow.parquet.ParquetFile`` of ``path``; an InputError if it is not one."""
    parquet = import_extra("pyarrow.parquet", "parquet", "reading a Parquet corpus",
                           alternative="convert it to JSONL")
    try:
        return parquet.ParquetFile(path)
    except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError, ArrowIOError an OSError
        raise InputError(path, f"not a readable Parquet file: {error}", hint="give a .parquet file") from error


def parquet_rows(path: Path) -> int:
    return int(open_parquet(path).metadata.num_rows)


def iter_parquet_passages(path: Path, meter: Meter | None = None) -> Iterator[tuple[Passage, Location]]:
    """Each row of ``path`` as a passage; ``meter`` counts rows."""
    file = open_parquet(path)
    names = list(file.schema_arrow.names)
    id_column = _pick(names, ID_COLUMNS, path, "id")
    text_column = _pick(names, TEXT_COLUMNS, path, "text")
    columns = [id_column, text_column] + (["title"] if "title" in names else [])
    row = 0
    try:
        batches = file.iter_batches(batch_size=BATCH_ROWS, columns=columns)
        for batch in batches:
            values = batch.to_pydict()
            ids, texts = values[id_column], values[text_column]
            titles = values.get("title") or [None] * len(ids)
            for passage_id, text, title in zip(ids, texts, titles, strict=True):
                row += 1
                yield _passage(path, row, passage_id, text, title, id_column, text_column), \
                    Location(str(path), row, str(passage_id))
            if meter is not None:
                meter.at(row)
    except (OSError, ValueError) as error:
        raise InputError(path, f"cannot read row {row + 1} on: {error}", hint="check or re-download the file") \
            from error


def _pick(names: list[str], wanted: tuple[str, ...], path: Path, what: str) -> str:
    for name in wanted:
        if name in names:
            return name
    raise InputError(path, f"no {what} column ({' or '.join(wanted)}); its columns are {', '.join(names)}",
                     field=wanted[0], hint=COLUMNS_HINT)


def _passage(path: Path, row: int, passage_id: Any, text: Any, title: Any, id_column: str,
             text_column: str) -> Passage:
    where = f"row {row}: "
    if isinstance(passage_id, bool) or not isinstance(passage_id, (str, int)):
        raise InputError(path, where + f"id must be a string or an integer, got {type(passage_id).__name__}",
                         field=id_column, hint=COLUMNS_HINT)
    if not str(passage_id).strip():
        raise InputError(path, where + "empty id", field=id_column, hint=COLUMNS_HINT)
    if not isinstance(text, str):
        raise InputError(path, where + f"{text_column} must be a string, got {type(text).__name__}",
                         field=text_column, hint=COLUMNS_HINT)
    if title is not None and not isinstance(title, str):
        raise InputError(path, where + f"title must be a string, got {type(title).__name__}", field="title",
                         hint=COLUMNS_HINT)
    return Passage(id=str(passage_id), text=text, title=title or "")
