"""``winnow models`` and ``winnow methods``: what Winnow knows and how each method is built."""

from __future__ import annotations

from rich import box
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table

from .common import app, out


@app.command()
def models() -> None:
    """List the models Winnow knows, their size, and whether they are installed."""
    from ..models import format_models_table, list_models

    out.print(format_models_table(list_models(), wide=out.width >= 120))


@app.command()
def methods() -> None:
    """List the methods, their stages, and each setting's CPU default beside the papers' value."""
    from ..methods import METHODS, PROFILES, method_settings

    # One block per method (what it does, its stages and roles, then a three-column table of its
    # settings) rather than one table of seven columns: it reads the same at 80 columns as at 200.
    out.print("[bold]Methods[/bold]: default is Winnow's CPU-friendly value; paper is the value "
              "`--profile paper` sets (* where they differ)", highlight=False)
    for name, cls in METHODS.items():
        defaults = cls.Settings().to_dict()
        paper = method_settings(name, profile="paper").to_dict()
        out.print()
        # Optional stages are written "[…]", which rich would take for markup and drop.
        out.print(f"[bold cyan]{name}[/bold cyan]: {escape(cls.summary)}", highlight=False)
        out.print(Padding(f"stages: {escape(' → '.join(cls.stages))}", (0, 0, 0, 2)), highlight=False)
        if cls.roles:
            roles = "; ".join(f"{role}: {what}" for role, what in cls.roles.items())
            out.print(Padding(f"agent roles (--agent ROLE=MODEL): {escape(roles)}", (0, 0, 0, 2)), highlight=False)
        table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
        table.add_column("setting", no_wrap=True)
        table.add_column("default", overflow="fold")
        table.add_column("paper", overflow="fold")
        for key, value in defaults.items():
            # A setting the method ignores (vanilla's n, MAIN-RAG's k) has no paper value to show.
            marked = "- (not used)" if key in cls.unused_settings else \
                f"{paper[key]}{' *' if paper[key] != value else ''}"
            table.add_row(key, escape(str(value)), escape(marked))
        out.print(table)
    profiles = Table(title="Profiles (--profile NAME)", title_justify="left")
    profiles.add_column("profile", no_wrap=True)
    profiles.add_column("what it sets", overflow="fold")
    for profile in PROFILES.values():
        profiles.add_row(profile.name, profile.summary)
    out.print(profiles)
