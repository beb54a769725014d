"""The command line at a terminal: help that fits 80 columns, choices read from the registries,
shell completion. In process (tests/cli_runner.py), as ``winnow`` runs."""

from __future__ import annotations

import re

import pytest
from cli_runner import winnow

from winnow.index import ANN_KINDS, RETRIEVER_KINDS
from winnow.llm import BACKENDS
from winnow.methods import METHODS
from winnow.rerank import RERANK_METHODS

COMMANDS = ("ask", "rerank", "search", "index", "eval", "serve", "mcp", "tune", "report")


def help_of(*command: str, columns: int = 80) -> str:
    result = winnow(*command, "--help", env={"COLUMNS": str(columns)})
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_ask_help_fits_sixty_lines_of_80_columns():
    text = help_of("ask")
    lines = text.splitlines()
    assert len(lines) <= 60, text
    assert max(len(line) for line in lines) <= 80


@pytest.mark.parametrize("command", COMMANDS)
def test_no_option_name_is_cut_at_80_columns(command):
    text = help_of(command)
    rows = [line for line in text.splitlines() if line.lstrip("│ *").startswith("-")]
    assert rows, text
    for row in rows:
        names = row.strip("│ *").split("  ")[0]
        assert "…" not in names, row


def test_the_run_options_are_grouped_into_panels():
    text = help_of("ask")
    panels = re.findall(r"╭─ (.+?) ─", text)
    assert panels == ["Arguments", "Options", "Method", "Settings", "Model", "Server (--backend openai)",
                      "Retrieval"]


def option_help(text: str, flag: str) -> str:
    """The help of ``flag``: its row and the rows that continue it, joined."""
    rows = text.splitlines()
    start = next(i for i, row in enumerate(rows) if re.search(rf"│ +{re.escape(flag)}\b", row))
    parts = [rows[start]]
    for row in rows[start + 1:]:
        if re.match(r"│ +-", row) or not row.startswith("│"):
            break
        parts.append(row)
    return " ".join(" ".join(part.strip("│").split()) for part in parts)


@pytest.mark.parametrize(("flag", "values"), [("--method", tuple(METHODS)), ("--backend", BACKENDS),
                                              ("--retriever", RETRIEVER_KINDS), ("--ann", tuple(ANN_KINDS))])
def test_choices_are_listed_from_their_registry(flag, values):
    assert ", ".join(values) in option_help(help_of("ask", columns=200), flag)


def test_rerank_lists_the_rerank_methods():
    assert ", ".join(RERANK_METHODS) in option_help(help_of("rerank", columns=200), "--method")


def complete(words: str) -> list[str]:
    """What bash completion offers for the last of ``words`` (typer's completion protocol)."""
    parts = words.split(" ")
    result = winnow(env={"_WINNOW_COMPLETE": "complete_bash", "COMP_WORDS": words,
                         "COMP_CWORD": str(len(parts) - 1)})
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_shell_completion_offers_the_registries_values():
    assert complete("winnow ask --method r") == [m for m in METHODS if m.startswith("r")]
    assert complete("winnow ask --retriever ") == list(RETRIEVER_KINDS)
    assert complete("winnow ask --backend ") == list(BACKENDS)
    assert complete("winnow rerank --method emb") == ["embedding"]
    assert "--retriever" in complete("winnow ask --ret")


def test_completion_can_be_installed():
    assert "--install-completion" in help_of()
    # typer finds the shell from the parent process, which a test run has not always got: named here
    # (its own switch for that, under which --show-completion takes the shell's name).
    shown = winnow("--show-completion", "bash", env={"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"})
    assert shown.returncode == 0, shown.stderr
    assert "_WINNOW_COMPLETE=complete_bash" in shown.stdout and "complete -o default -F" in shown.stdout
    assert "Warning" not in shown.stderr, shown.stderr
