"""``winnow report --format csv|latex``: the report's tables for a spreadsheet or a paper.

The Markdown report (:mod:`.report`) is the one place the tables are computed; this module reads its
tables back (each a pipe table under a ``## heading``, written by :func:`.report.md_table`) and
writes them again: as CSV, one file per table beside the report (``REPORT-answers.csv``, …), or as
LaTeX, one ``.tex`` file of ``tabular`` environments with each table's heading and the notes under
it (the Holm note among them). The numbers are the Markdown's, character for character.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..atomic import write_text

FORMATS = ("markdown", "csv", "latex")


@dataclass
class Table:
    """One table of the report: its section heading, header, alignments, rows and the notes below it."""

    heading: str
    header: list[str]
    align: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def cells(line: str) -> list[str]:
    """The cells of a Markdown table row, ``\\|`` read back as ``|``."""
    inner = line.strip()[1:-1]
    return [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", inner)]


def read_tables(markdown: str) -> list[Table]:
    """Every pipe table of ``markdown`` with the ``##`` heading above it and the paragraphs after it."""
    tables: list[Table] = []
    heading, current = "", None
    lines = markdown.splitlines()
    for number, line in enumerate(lines):
        if line.startswith("## "):
            heading, current = line[3:].strip(), None
        elif line.startswith("|"):
            if current is None:
                rule = cells(lines[number + 1]) if number + 1 < len(lines) else []
                current = Table(heading, cells(line), ["r" if cell.endswith(":") and not cell.startswith(":")
                                                       else "l" for cell in rule])
                tables.append(current)
            elif not set(line) <= set("|-: "):
                current.rows.append(cells(line))
        elif line.strip() and current is not None and not line.startswith(("#", "!")):
            current.notes.append(line.strip())
        elif line.startswith("#"):
            current = None
    return tables


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "table"


def write_csv(tables: list[Table], out: Path) -> list[Path]:
    """One CSV per table beside ``out`` (``REPORT-<heading>.csv``; a second table of one heading gets -2)."""
    written: list[Path] = []
    for table in tables:
        name = f"{out.stem}-{slug(table.heading)}"
        path = out.with_name(f"{name}.csv")
        count = 2
        while path in written:
            path, count = out.with_name(f"{name}-{count}.csv"), count + 1
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(table.header)
        writer.writerows(table.rows)
        write_text(path, buffer.getvalue())
        written.append(path)
    return written


LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                 "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def latex(text: str) -> str:
    """``text`` with LaTeX's special characters escaped (``Δ`` and the like need a Unicode engine or
    ``\\usepackage[utf8]{inputenc}``, as every table with Greek letters does)."""
    text = re.sub(r"`([^`]*)`", r"\1", text)  # Markdown code spans: their text
    return "".join(LATEX_SPECIAL.get(char, char) for char in text)


def write_latex(tables: list[Table], out: Path, title: str) -> Path:
    """``REPORT.tex``: each table as a ``tabular`` (booktabs rules) under its heading, its notes after it."""
    parts = [f"% {latex(title)}: written by `winnow report --format latex`; needs \\usepackage{{booktabs}}"]
    for table in tables:
        body = [" & ".join(latex(cell) for cell in table.header) + r" \\", r"\midrule"]
        body += [" & ".join(latex(cell) for cell in row) + r" \\" for row in table.rows]
        parts.append("\n".join([f"\\subsection*{{{latex(table.heading)}}}",
                                f"\\begin{{tabular}}{{{''.join(table.align)}}}", r"\toprule", *body, r"\bottomrule",
                                r"\end{tabular}", *(f"\n{latex(note)}" for note in table.notes)]))
    path = out.with_suffix(".tex")
    write_text(path, "\n\n".join(parts) + "\n")
    return path


def export(markdown: str, out: Path, fmt: str, title: str) -> list[Path]:
    """The report's tables written as ``fmt`` (csv or latex) beside ``out``; the files written."""
    tables = read_tables(markdown)
    if fmt == "csv":
        return write_csv(tables, out)
    if fmt == "latex":
        return [write_latex(tables, out, title)]
    return []
