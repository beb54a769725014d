"""Human-readable output: the answer, the passages with how each stage moved them, and the cost."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .records import Answer, CandidateList, StageTrace, Usage


def snippet(text: str, width: int = 110) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def passages_table(candidates: CandidateList, title: str = "Passages", *, width: int = 80) -> Table:
    """One row per passage in final order: rank in every stage that ranked it, and the scores.

    A column per stage while they leave the passage text 30 of the console's ``width`` columns;
    beyond that (three stages at 80 columns) one column holds each stage's rank and score, a line
    per stage, so no cell is ever cut."""
    stages: list[str] = []
    for candidate in candidates:
        for entry in candidate.scores:
            if entry.stage not in stages:
                stages.append(entry.stage)
    ranks_header = " → ".join(f"{s} rank" for s in stages) or "rank"
    fixed = 4 + len(ranks_header) + sum(len(f"{s} score") + 3 for s in stages) + 3 * 3
    table = Table(title=title, title_justify="left", show_lines=False, expand=True)
    table.add_column("#", justify="right", no_wrap=True)
    compact = fixed > width - 30
    if compact:
        table.add_column("stage: rank, score", no_wrap=True)
    else:
        table.add_column(ranks_header, justify="center", no_wrap=True)
        for stage in stages:
            table.add_column(f"{stage} score", justify="right", no_wrap=True)
    table.add_column("passage", ratio=1)
    for rank, candidate in enumerate(candidates, start=1):
        scores = [f"{v:.3f}" if (v := candidate.score_of(s)) is not None else "-" for s in stages]
        body = Text()
        body.append(candidate.passage.title or candidate.passage.id, style="bold")
        body.append(f"  [{candidate.passage.id}]\n", style="dim")
        body.append(snippet(candidate.passage.text))
        if compact:
            name_width = max(map(len, stages))
            lines = [f"{s:<{name_width}} #{candidate.rank_of(s) or '-'} {score}"
                     for s, score in zip(stages, scores, strict=True)]
            table.add_row(str(rank), "\n".join(lines), body)
        else:
            ranks = " → ".join(str(candidate.rank_of(s) or "-") for s in stages)
            table.add_row(str(rank), ranks, *scores, body)
    return table


def no_hits_note(query: str, retriever: str) -> str:
    """What to say instead of an empty table when a search finds nothing."""
    why = ("none of its words is in the index once English stop words are removed; try other words"
           if retriever == "bm25" else "the index gave no passages")
    return f"no passages matched {query!r} ({retriever}): {why}"


def usage_table(stages: list[StageTrace], title: str = "LLM usage") -> Table:
    """Cost per stage name (stages of the same name, e.g. over several questions, are added up)."""
    by_name: dict[str, tuple[Usage, list[float]]] = {}
    for stage in stages:
        usage, seconds = by_name.setdefault(stage.name, (Usage(), [0.0]))
        usage.add(stage.usage)
        seconds[0] += stage.seconds
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    # Short headers and light borders: seven columns fit 80 with stage names of 16 characters.
    for column in ("stage", "calls", "cache hits", "prompt tok", "output tok", "LLM s", "stage s"):
        table.add_column(column, justify="left" if column == "stage" else "right", no_wrap=column == "stage")
    total, total_seconds = Usage(), 0.0
    for name, (u, seconds) in by_name.items():
        total.add(u)
        total_seconds += seconds[0]
        table.add_row(name, str(u.calls), str(u.cache_hits), str(u.prompt_tokens), str(u.completion_tokens),
                      f"{u.seconds:.1f}", f"{seconds[0]:.1f}")
    table.add_row("total", str(total.calls), str(total.cache_hits), str(total.prompt_tokens),
                  str(total.completion_tokens), f"{total.seconds:.1f}", f"{total_seconds:.1f}", style="bold")
    return table


def print_answer(console: Console, answer: Answer) -> None:
    console.print(Panel(Text(answer.text or "(empty answer)", style="bold green"),
                        title=f"[b]{answer.method}[/b]: {answer.question}", title_align="left"))
    console.print(passages_table(answer.passages, title=f"Passages the answer was read from ({len(answer.passages)})",
                                 width=console.width))
    console.print(usage_table(answer.trace.stages))
    for note in answer_notes(answer):
        console.print(f"[yellow]note:[/] {note}", highlight=False)


def answer_notes(answer: Answer) -> list[str]:
    """What a reader of the answer must not miss: an answer cut by its token limit, passages cut to
    fit the model's context, and any stage's warning."""
    notes = []
    for stage in answer.trace.stages:
        if stage.details.warning:
            notes.append(f"{stage.name}: {stage.details.warning}")
        if stage.details.fitted:
            notes.append(fitting_note(stage.name, stage.details.fitted))
    return notes


def fitting_note(stage: str, fitted: list[dict[str, Any]]) -> str:
    """How many passages a stage cut to fit the context, how much of them it kept, and how it counted."""
    before = sum(cut["chars_before"] for cut in fitted)
    after = sum(cut["chars_after"] for cut in fitted)
    kept = f"{after:,} of their {before:,} characters kept ({after / before:.0%})" if before else "emptied"
    estimated = str(fitted[0].get("token_counting", "")).startswith("estimated")
    counted = "estimated tokens" if estimated else "the model's tokens"
    return (f"{stage}: {len(fitted)} passage(s) shortened to fit the model's context of {fitted[0]['context_size']} "
            f"tokens, {kept}, counted in {counted} (--context-size raises it)")


def summary_line(usage: Usage, seconds: float) -> str:
    line = (f"{seconds:.1f} s · {usage.calls} LLM calls ({usage.cache_hits} cached) · "
            f"{usage.prompt_tokens} prompt + {usage.completion_tokens} completion tokens")
    if usage.cache_hits:
        line += (f" · the cached calls first cost {usage.cached_prompt_tokens} prompt + "
                 f"{usage.cached_completion_tokens} completion tokens and {usage.cached_seconds:.1f} s")
    if usage.cache_rejected:
        line += f" · {usage.cache_rejected} cached answer(s) refused and asked again"
    if usage.choices_not_in_top:
        line += (f" · {usage.choices_not_in_top} choice answer(s) with no choice among the top tokens "
                 "(scored as equally likely)")
    return line


__all__ = ["answer_notes", "passages_table", "print_answer", "snippet", "summary_line", "usage_table"]
