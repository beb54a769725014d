"""``winnow cache info | prune | clear``: look at, shrink and empty the LLM call cache.

The cache (:mod:`winnow.llm.cache`) keeps every greedy call's answer so a rerun costs no model
time; it is bounded by ``WINNOW_LLM_CACHE_MAX_SIZE`` (1 GB unless set), its oldest entries
evicted past it. These commands act on the default cache (under ``$WINNOW_CACHE_DIR``) or ``--path``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from .common import JsonOption, app, out

cache_app = typer.Typer(no_args_is_help=True, help="The LLM call cache: its size, and emptying it.")
app.add_typer(cache_app, name="cache")

PathOption = Annotated[Optional[Path], typer.Option(
    "--path", help="The cache file (default: llm-calls.sqlite under $WINNOW_CACHE_DIR or ~/.cache/winnow).")]


def _cache_file(path: Path | None) -> Path:
    from ..paths import llm_cache_path

    return (path or llm_cache_path()).expanduser()


def _when(unix: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(unix))


@cache_app.command("info")
def info(path: PathOption = None, as_json: JsonOption = False) -> None:
    """Where the cache is, how many answers it holds, its size and its limit."""
    from ..llm.cache import CallCache, default_max_bytes, human_size

    where = _cache_file(path)
    entries = size = on_disk = evicted = 0
    span: tuple[float, float] | None = None
    if where.is_file():
        cache = CallCache(where)  # a damaged file is a CacheDamaged: one line with the way out
        try:
            entries, size, on_disk, evicted = len(cache), cache.size_bytes(), cache.file_bytes(), cache.evicted()
            span = cache.oldest_and_newest()
        finally:
            cache.close()
    limit = default_max_bytes()
    if as_json:
        out.print_json(json.dumps({"path": str(where), "exists": where.is_file(), "entries": entries, "bytes": size,
                                   "file_bytes": on_disk, "max_bytes": limit, "evicted": evicted,
                                   "oldest": span and span[0], "newest": span and span[1]}))
        return
    table = Table(title="LLM call cache", title_justify="left", show_header=False)
    table.add_column("what", no_wrap=True, style="bold")
    table.add_column("value", overflow="fold")
    table.add_row("path", escape(str(where)) + ("" if where.is_file() else " (not created yet)"))
    table.add_row("entries", f"{entries:,}")
    table.add_row("size", f"{human_size(size)} of {human_size(limit)} allowed ({human_size(on_disk)} on disk)")
    table.add_row("evicted", f"{evicted:,} (oldest first, past the limit: WINNOW_LLM_CACHE_MAX_SIZE)")
    if span is not None:
        table.add_row("written", f"{_when(span[0])} to {_when(span[1])}")
    out.print(table)


@cache_app.command("prune")
def prune(max_size: Annotated[str, typer.Option("--max-size", help="Keep at most this much, e.g. 200MB.")],
          path: PathOption = None) -> None:
    """Remove the oldest answers until the cache holds at most --max-size, and give the space back."""
    from ..llm.cache import CallCache, human_size, parse_size

    limit = parse_size(max_size, what="--max-size")
    where = _cache_file(path)
    if not where.is_file():
        out.print(f"no cache at {escape(str(where))}: nothing to prune", highlight=False)
        return
    cache = CallCache(where, max_bytes=limit)
    try:
        removed, freed = cache.prune(limit)
        left = len(cache)
    finally:
        cache.close()
    out.print(f"pruned {removed:,} entries, freed {human_size(freed)}; {left:,} left in {escape(str(where))}",
              highlight=False)


@cache_app.command("clear")
def clear(path: PathOption = None) -> None:
    """Delete every cached answer (the next runs call the model again); a damaged cache file is removed."""
    from ..errors import WinnowError
    from ..llm.cache import CallCache, human_size

    where = _cache_file(path)
    if not where.is_file():
        out.print(f"no cache at {escape(str(where))}: nothing to clear", highlight=False)
        return
    try:
        cache = CallCache(where)
        try:
            removed, freed = cache.clear()
        finally:
            cache.close()
    except WinnowError as exc:  # damaged (or not a database): nothing in it can be trusted, so it goes whole
        files = [where, where.with_name(where.name + "-wal"), where.with_name(where.name + "-shm")]
        freed = sum(f.stat().st_size for f in files if f.is_file())
        for f in files:
            f.unlink(missing_ok=True)
        out.print(f"the cache {escape(str(where))} was damaged ({escape(exc.message)}); removed it, freeing "
                  f"{human_size(freed)}: the next run starts a fresh one", highlight=False)
        return
    out.print(f"cleared {removed:,} entries, freed {human_size(freed)} from {escape(str(where))}", highlight=False)
