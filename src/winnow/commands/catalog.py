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
    """List the methods, their stages, and each setting's CPU default beside the papers' value."""
    from ..methods import METHODS, PROFILES, method_settings

    table = Table(title="Methods", title_justify="left", show_lines=True,
                  caption="default: Winnow's CPU-friendly value; paper: the value `--profile paper` sets "
                          "(* where they differ)", caption_justify="left")
    for column in ("method", "stages", "what it does", "setting", "default", "paper",
                   "agent roles (--agent ROLE=MODEL)"):
        table.add_column(column, no_wrap=column in ("setting", "default", "paper"))
    for name, cls in METHODS.items():
        defaults = cls.Settings().to_dict()
        paper = method_settings(name, profile="paper").to_dict()
        roles = "\n".join(f"{role}: {what}" for role, what in cls.roles.items()) or "-"
        # A setting the method ignores (vanilla's n, MAIN-RAG's k) has no paper value to show.
        marked = ["- (not used)" if key in cls.unused_settings else f"{paper[key]}{' *' if paper[key] != value else ''}"
                  for key, value in defaults.items()]
        # Optional stages are written "[…]", which rich would take for markup and drop.
        table.add_row(name, escape("\n".join(cls.stages)), escape(cls.summary), "\n".join(defaults),
                      escape("\n".join(str(value) for value in defaults.values())), escape("\n".join(marked)),
                      escape(roles))
    out.print(table)
    profiles = Table(title="Profiles (--profile NAME)", title_justify="left")
    profiles.add_column("profile", no_wrap=True)
    profiles.add_column("what it sets")
    for profile in PROFILES.values():
        profiles.add_row(profile.name, profile.summary)
    out.print(profiles)
