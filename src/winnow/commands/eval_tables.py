"""What ``winnow eval`` prints: the run's metric and cost tables, a sweep's table, the endpoints'
health and the summary of a run (notes on what was refused or skipped, then one line of totals).

Tables are narrow (:data:`NARROW`): at 80 columns every figure stays whole (tests/test_narrow_tables.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich import box
from rich.markup import escape

from .common import err, out

if TYPE_CHECKING:
    from rich.table import Table

    from ..evaluation.runner import EvalRun

#: Light borders and one space between cells: the run's tables keep every figure whole at 80 columns.
NARROW: dict[str, Any] = {"box": box.SIMPLE_HEAD, "collapse_padding": True, "pad_edge": False}


def duration(seconds: float) -> str:
    """A span of time as a person reads it: 45s, 3m07s, 2h05m."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def print_summary(run: EvalRun, metrics: dict[str, Any], *, as_json: bool, seconds: float,
                   stale_cache_entries: int) -> None:
    """What the run did and found: notes on what was refused or skipped, the metric and cost tables
    (or the metrics as JSON) and one line of totals."""
    from ..evaluation.qrels_coverage import unknown_documents_note

    if stale_cache_entries:
        err.print(f"[yellow]call cache:[/] {stale_cache_entries} cached answer(s) written by an older Winnow were "
                  "unusable (a NaN log-probability or a missing field) and were asked again; the cache now holds "
                  "the new answers", highlight=False)
    if run.failures:
        err.print(f"[yellow]{len(run.failures)} question(s) failed and were skipped[/] (see "
                  f"{run.folder.errors_path}); run the same command again to retry them", highlight=False)
    if metrics["qrels"] and (note := unknown_documents_note(metrics["qrels"]["index_coverage"])):
        err.print(f"[yellow]qrels:[/] {escape(note)}", highlight=False, soft_wrap=True)
    if run.run_files_error:
        err.print(f"[yellow]TREC run files not written:[/] {run.run_files_error}", highlight=False)
    if injection := metrics.get("injection"):
        demoted = f", {injection['passages_demoted']} demoted" if injection.get("passages_demoted") else ""
        err.print(f"[yellow]injection guard:[/] {injection['passages_flagged']} passage(s) of "
                  f"{injection['questions_flagged']} question(s) read like instructions to the model (possible "
                  f"prompt injection){demoted}; their traces name them (injection-guard stage)", highlight=False)
    if as_json:
        out.print_json(data=metrics)
    else:
        out.print(metrics_headline(metrics), highlight=False, markup=False)
        out.print(metrics_table(metrics))
        if metrics.get("stage_cost"):
            err.print(stage_cost_table(metrics["stage_cost"], metrics["questions"]["answered"]))
        if metrics.get("cost_by_model"):
            err.print(model_cost_table(metrics))
    if metrics.get("cost_usd"):
        err.print(usd_line(metrics["cost_usd"]), highlight=False)
    cost = metrics["cost"]
    err.print(f"{run.new_answers} questions answered in {duration(seconds)}; the run so far: "
              f"{metrics['questions']['answered']}/{metrics['questions']['selected']} questions · "
              f"{cost['llm_calls']} LLM calls ({cost['cache_hits']} cached) · {cost['prompt_tokens']} prompt + "
              f"{cost['completion_tokens']} completion tokens · {cost['seconds_per_question']:.1f} s/question"
              f"{_without_cache(cost)} · wrote {run.folder.path}", highlight=False)


def _without_cache(cost: dict[str, Any]) -> str:
    full = cost.get("without_cache")
    if not cost["cache_hits"] or full is None:
        return ""
    return (f" (without the cache: {full['llm_calls_per_question']:.1f} calls, "
            f"{full['prompt_tokens_per_question']:.0f} prompt tokens and "
            f"{full['llm_seconds_per_question']:.1f} s of model time per question)")


def print_endpoint_health(per_model: list[dict[str, Any]]) -> None:
    """One line per model whose server calls were retried or hedged: how many, how many went to
    another endpoint (failed over), how many hedges answered first, and which endpoints' breakers
    opened (:mod:`winnow.llm.dispatch`)."""
    for found in per_model:
        if not found["retries"] and not found.get("hedges"):
            continue
        opened = [f"{url} ({e['failures']} failures, breaker opened {e['breaker_opened']}×)"
                  for url, e in found["endpoints"].items() if e["breaker_opened"]]
        hedged = f", {found['hedges']} hedged ({found['hedges_won']} answered first)" if found.get("hedges") else ""
        err.print(f"[yellow]endpoints:[/] {found['calls']} calls, {found['retries']} retried, "
                  f"{found['failovers']} failed over to another endpoint{hedged}"
                  + (f"; taken out of the pool: {', '.join(opened)}" if opened else ""), highlight=False)


def metrics_headline(metrics: dict[str, Any]) -> str:
    """The run's label and answer metrics: a line of its own above :func:`metrics_table`, wrapped at
    the terminal's width (as a table title it wrapped at the table's, cutting the label in two)."""
    from ..evaluation.schema import ACCURACY_NAMES

    answer = metrics["answer"]
    accuracy = f"accuracy {answer['accuracy']:.1%}"
    quoted = metrics.get("headline_accuracy")
    if quoted:  # a paper profile's run: the metric the papers cite first, Winnow's beside it
        accuracy = (f"accuracy ({ACCURACY_NAMES[quoted]}) {answer[quoted]:.1%} · "
                    f"{ACCURACY_NAMES['accuracy']} {answer['accuracy']:.1%}")
    return (f"{metrics['run']['label']} · {metrics['questions']['answered']} questions · "
            f"EM {answer['em']:.1%} · F1 {answer['f1']:.1%} · {accuracy}")


def metrics_table(metrics: dict[str, Any]) -> Table:
    """Answer Recall@k (and nDCG@10, MRR@10 with qrels) per list; :func:`metrics_headline` goes above it."""
    from rich.table import Table

    recall = metrics["answer_recall"]
    ks = list(next(iter(recall.values())).keys()) if recall else []
    qrels_rows = (metrics.get("qrels") or {}).get("rows") or {}
    qrels_names = [name for name in ("nDCG@10", "MRR@10") if qrels_rows]
    table = Table(caption="R@k: share of questions with an answer in the top k", caption_justify="left", **NARROW)
    table.add_column("list", no_wrap=True)
    for column in ("len", *ks, *qrels_names):
        table.add_column(column, justify="right", no_wrap=True)
    for row in metrics["rows"]:
        table.add_row(row, f"{metrics['list_length'][row]:.1f}", *[f"{recall[row][k]:.1%}" for k in ks],
                      *[f"{qrels_rows[row][name]:.3f}" for name in qrels_names])
    return table


def stage_cost_table(stage_cost: dict[str, dict[str, float]], questions: int) -> Table:
    """The run's LLM cost per stage: calls, tokens and the seconds the calls took on the server side
    (summed over calls, so calls in flight together count each; more than the stage's wall time)."""
    from rich.table import Table

    table = Table(title=f"LLM cost per stage over {questions} questions", title_justify="left", **NARROW)
    rows = []
    for name, cost in stage_cost.items():
        if not cost.get("llm_calls") and not cost.get("llm_seconds"):
            continue  # retrieval and other stages without the LLM
        total = {key: value * questions for key, value in cost.items()}
        rows.append([name, f"{total['llm_calls']:,.0f}", f"{total['prompt_tokens']:,.0f}",
                     f"{total['completion_tokens']:,.0f}", f"{total.get('llm_seconds', 0):,.1f}",
                     f"{total.get('retries', 0):,.0f}", f"{total['seconds']:,.1f}"])
    columns = ("stage", "calls", "prompt tok", "output tok", "server s", "retries", "wall s")
    for i, column in enumerate(columns):
        # Each figure's full width is its column's least, so figures stay whole; headers wrap at their space.
        table.add_column(column, justify="left" if column == "stage" else "right", no_wrap=column == "stage",
                         min_width=max((len(row[i]) for row in rows), default=0))
    for row in rows:
        table.add_row(*row)
    return table


def model_cost_table(metrics: dict[str, Any]) -> Table:
    """The run's LLM cost per model and per agent role (GAR-meets-RAG App. B, Table A1): calls and
    tokens, and USD with ``--prices``."""
    from rich.table import Table

    questions = metrics["questions"]["answered"]
    priced = metrics.get("cost_usd") is not None
    table = Table(title=f"LLM cost per model and role over {questions} questions", title_justify="left", **NARROW)
    for column in ("per", "name", "calls", "prompt tok", "output tok", "cache hits", *(["USD"] if priced else [])):
        table.add_column(column, justify="left" if column in ("per", "name") else "right", no_wrap=column != "name",
                         overflow="fold")
    rows = [("model", name, cost) for name, cost in metrics["cost_by_model"].items()]
    rows += [("role", name, cost) for name, cost in (metrics.get("cost_by_role") or {}).items()]
    for kind, name, cost in rows:
        usd = cost.get("usd")
        money = [f"{usd:,.4f}" if usd is not None else "no price"] if priced else []
        table.add_row(kind, escape(name), f"{cost['llm_calls']:,}", f"{cost['prompt_tokens']:,}",
                      f"{cost['completion_tokens']:,}", f"{cost['cache_hits']:,}", *money)
    return table


def usd_line(usd: dict[str, Any]) -> str:
    """The run's cost in USD as one line (a model without a price makes no total: it is named)."""
    if usd["total"] is None:
        return (f"cost in USD: not computed, {usd['prices']} has no price for {', '.join(usd['unpriced_models'])} "
                f"(add them; 0 for a free local model)")
    line = f"cost in USD ({usd['prices']}): {usd['total']:,.4f} in all, {usd['per_question']:,.6f} per question"
    if usd["without_cache_per_question"] is not None and usd["without_cache_per_question"] != usd["per_question"]:
        line += f" ({usd['without_cache_per_question']:,.6f} per question had nothing come from the call cache)"
    return line


def sweep_table(summary: dict[str, Any]) -> Table:
    """Answers and calls per value; for a sweep over N, RankRAG's reranking time overhead (§4.3, §5.5)."""
    from rich.table import Table

    over_n = summary["setting"] == "n"
    title = f"{summary['method']} {summary['model']} · sweep over {summary['setting']}"
    caption = "calls: made / asked; the rest came from the call cache (shared with another value, or cached before)"
    if over_n:
        title += " (RankRAG §5.5, Fig. 5)"
        caption += ("\noverhead: N·t2 / (t1 + t3) (RankRAG §4.3), seconds per question: t1 retrieval, N·t2 the model "
                    "calls before generation, t3 generation; cached calls at the seconds first measured")
    table = Table(title=title, title_justify="left", caption=caption, caption_justify="left", **NARROW)
    columns = [summary["setting"], "questions", "EM", "F1", "acc.", "calls"]
    if over_n:
        columns += ["t1 s", "N·t2 s", "t3 s", "overhead"]
    rows = []
    for row in summary["rows"]:
        cells = [str(row["value"]), str(row["questions"]), f"{row['em']:.1%}", f"{row['f1']:.1%}",
                 f"{row['accuracy']:.1%}", f"{row['llm_calls']} / {row['llm_calls'] + row['cache_hits']}"]
        if over_n:
            eff = row.get("efficiency") or {}
            ratio = eff.get("overhead_ratio")
            cells += [f"{eff.get('retrieval_seconds', 0):.3f}", f"{eff.get('reranking_seconds', 0):.2f}",
                      f"{eff.get('generation_seconds', 0):.2f}", "–" if ratio is None else f"{ratio:.2f}x"]
        rows.append(cells)
    for i, column in enumerate(columns):
        # Figures keep their full width (calls may break at its " / "); headers wrap at a space.
        least = 0 if column == "calls" else max((len(cells[i]) for cells in rows), default=0)
        table.add_column(column, justify="right", min_width=least)
    for cells in rows:
        table.add_row(*cells)
    return table
