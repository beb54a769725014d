"""The command line's start (:mod:`winnow.cli`, :mod:`winnow.startup`): a command imports only the
module that registers it, and the garbage collector, paused while the command line starts, runs
again in every command's body. Each check runs a fresh interpreter: what a process has imported
and whether it collects are the process's own."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from winnow.cli import COMMAND_MODULES


def python(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.subprocess
def test_each_command_is_registered_by_the_module_the_table_names_in_help_order():
    # Imported one at a time, in the table's order: the commands each module adds.
    found = json.loads(python("""
        import importlib, json
        from winnow.cli import COMMAND_MODULES
        from winnow.commands.common import app
        def names():
            return [c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands] + [
                g.name for g in app.registered_groups]
        added = {}
        for module in dict.fromkeys(COMMAND_MODULES.values()):
            before = set(names())
            importlib.import_module(f"winnow.commands.{module}")
            for name in names():
                if name not in before:
                    added[name] = module
        print(json.dumps(added))
    """))
    assert found == COMMAND_MODULES
    # Every module of winnow/commands that registers a command is in the table (the others are helpers).
    folder = Path(sys.modules["winnow.cli"].__file__).parent / "commands"
    registering = {path.stem for path in folder.glob("*.py") if "@app.command" in path.read_text()
                   or "app.add_typer" in path.read_text()}
    assert registering == set(COMMAND_MODULES.values())


@pytest.mark.subprocess
def test_a_command_line_imports_only_its_command_module_and_help_imports_them_all():
    imported = json.loads(python("""
        import json, sys
        from winnow import cli
        def commands():
            return sorted(m.rsplit(".", 1)[1] for m in sys.modules if m.startswith("winnow.commands.")
                          and m != "winnow.commands.common")
        seen = {}
        cli.register_commands(["--debug", "eval", "--index", "x"])
        seen["eval"] = commands()
        cli.register_commands(["evl"])  # unknown: typer suggests from every command
        seen["unknown"] = commands()
        print(json.dumps(seen))
    """))
    assert "evaluate" in imported["eval"] and "serve" not in imported["eval"] and "tune" not in imported["eval"]
    assert set(COMMAND_MODULES.values()) <= set(imported["unknown"])


@pytest.mark.subprocess
def test_the_collector_is_paused_while_the_command_line_starts_and_runs_in_the_command():
    states = json.loads(python("""
        import gc, json, sys
        from winnow import cli
        from winnow.commands.common import app
        seen = {}
        @app.command("gc-state")
        def gc_state():
            seen["body"] = gc.isenabled()
            seen["frozen"] = gc.get_freeze_count()
            print(json.dumps(seen), flush=True)
        original = cli.run
        def run():
            seen["start"] = gc.isenabled()
            original()
        cli.run = run
        sys.argv = ["winnow", "gc-state"]
        cli.main()
    """))
    assert states["start"] is False  # main() paused it before the imports
    assert states["body"] is True and states["frozen"] > 10_000  # resumed, with the start's objects frozen


@pytest.mark.subprocess
def test_importing_the_command_line_leaves_the_collector_alone():
    assert python("""
        import gc
        import winnow.cli
        from winnow.cli import app
        print(gc.isenabled(), gc.get_freeze_count(), len(app.registered_commands) > 10)
    """).split() == ["True", "0", "True"]
