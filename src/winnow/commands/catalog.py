"""``winnow models`` and ``winnow methods``: what Winnow knows and how each method is built."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from .common import app, out


@app.command()
def models() -> None:
    """List the models Winnow knows, their size, and whether they are installed."""
    from ..models import format_models_table, list_models

    out.print(format_models_table(list_models()))


@app.command()
def methods() -> None:
    """List the methods, their stages and default settings."""
    from ..methods import METHODS

    table = Table(title="Methods", title_justify="left", show_lines=True)
    for column in ("method", "stages", "what it does", "defaults", "agent roles (--agent ROLE=MODEL)"):
        table.add_column(column)
    for name, cls in METHODS.items():
        defaults = "\n".join(f"{k}={v}" for k, v in cls.Settings().to_dict().items())
        roles = "\n".join(f"{role}: {what}" for role, what in cls.roles.items()) or "-"
        # Optional stages are written "[…]", which rich would take for markup and drop.
        table.add_row(name, escape("\n".join(cls.stages)), escape(cls.summary), escape(defaults), escape(roles))
    out.print(table)
