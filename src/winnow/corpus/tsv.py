"""Tab-separated passage collections, in the two layouts the field ships them in.

* DPR's ``psgs_w100.tsv`` (Karpukhin et al., EMNLP 2020, §4.1: 21,015,324 passages of 100 words from
  the 20 December 2018 English Wikipedia): a header line ``id<TAB>text<TAB>title``, then one passage a
  line. DPR wrote it with Python's ``csv`` module, so a text holding a double quote is wrapped in
  double quotes with each inner quote doubled (``"Aaron ( or ; ""Ahärôn"") is ..."``): such a field is
  unwrapped here. The same three columns without the header are read the same way.
* MS MARCO's passage ``collection.tsv`` (8,841,823 passages): ``id<TAB>text``, no header, texts
  raw (a quote is just a character, never a wrapper).

A ``.tsv.gz`` is decompressed on the fly. Every row must have the layout's number of fields and a
non-empty id: anything else stops the load with an :class:`InputError` naming the file, line and
field, since guessing at a broken row would index something else than what the user meant.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ..errors import InputError
from ..records import Passage
from .lines import read_lines
from .meter import Meter
from .report import Location

TSV_SUFFIXES = (".tsv", ".tsv.gz")
DPR_HEADER = ("id", "text", "title")
MARCO_HEADER = ("id", "text")
DPR_HINT = "each row must be: id <tab> text <tab> title (DPR's psgs_w100.tsv layout, after its header line)"
MARCO_HINT = "each row must be: id <tab> text (MS MARCO's collection.tsv layout)"
LAYOUT_HINT = ("a TSV corpus is DPR's layout (header id<tab>text<tab>title, then 3 fields a row) or MS MARCO's "
               "(id<tab>text, 2 fields a row, no header)")


def is_tsv(path: Path) -> bool:
    return path.name.lower().endswith(TSV_SUFFIXES)


def iter_tsv_passages(path: Path, meter: Meter | None = None) -> Iterator[tuple[Passage, Location]]:
    """Each row of the TSV collection ``path`` as a passage; the layout is told by the first line."""
    columns: tuple[str, ...] | None = None
    for line, text in read_lines(path, meter):
        if not text.strip():
            continue
        fields = text.split("\t")
        if columns is None:
            columns, is_header = _layout(fields, path, line)
            if is_header:
                continue
        if len(fields) != len(columns):
            hint = DPR_HINT if len(columns) == 3 else MARCO_HINT
            raise InputError(path, f"expected {len(columns)} tab-separated fields, got {len(fields)}", line=line,
                             hint=hint)
        passage_id = fields[0].strip()
        if not passage_id:
            raise InputError(path, "empty id", line=line, field="id",
                             hint=DPR_HINT if len(columns) == 3 else MARCO_HINT)
        if len(columns) == 3:
            passage = Passage(id=passage_id, text=_unquote(fields[1]), title=_unquote(fields[2]))
        else:
            passage = Passage(id=passage_id, text=fields[1])
        yield passage, Location(str(path), line, passage_id)


def _layout(fields: list[str], path: Path, line: int) -> tuple[tuple[str, ...], bool]:
    """The columns of the file and whether its first line is a header naming them."""
    names = tuple(field.strip().lower() for field in fields)
    if names in (DPR_HEADER, MARCO_HEADER):
        return names, True
    if len(fields) == 3:
        return DPR_HEADER, False
    if len(fields) == 2:
        return MARCO_HEADER, False
    raise InputError(path, f"the first line has {len(fields)} tab-separated fields", line=line, hint=LAYOUT_HINT)


def _unquote(field: str) -> str:
    """A field as Python's ``csv`` module wrote it: ``"..."`` with inner quotes doubled is unwrapped."""
    if len(field) >= 2 and field[0] == '"' and field[-1] == '"':
        return field[1:-1].replace('""', '"')
    return field
