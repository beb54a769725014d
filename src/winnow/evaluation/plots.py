"""PNG plots for run reports (matplotlib, Agg backend: no display needed).

* :func:`plot_answer_recall` - answer Recall@k of the first stage and of each run after reranking
  (RankRAG Tables 6 and 8 as curves).
* :func:`plot_n_tradeoff` - EM, accuracy and the reranking time overhead against N for runs that differ in N
  (RankRAG §5.5, Fig. 5: "Performance v.s. Efficiency").
* :func:`plot_judge_scores` - one question's MAIN-RAG judge scores, document by document, with the
  adaptive judge bar τ = mean − n·std (MAIN-RAG "Adaptive Judge Bar").
* :func:`plot_pareto_front` - quality against cost of the configurations ``winnow tune`` measured on
  every tuning question, the Pareto front drawn as a staircase and vanilla, the reference, marked.
"""

from __future__ import annotations

import importlib
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

from ..atomic import staged_file
from ..extras import import_extra

# Colour-blind-safe (Okabe-Ito); the first stage is always drawn in grey.
COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")
BASELINE = "#7f7f7f"


def _pyplot() -> ModuleType:
    matplotlib = import_extra("matplotlib", "eval", "the report's plots (winnow report)")
    matplotlib.use("Agg")
    # matplotlib is not analysed (pyproject's mypy overrides), so an import statement would give Any.
    plt = importlib.import_module("matplotlib.pyplot")

    plt.rcParams.update({"figure.dpi": 110, "savefig.dpi": 110, "font.size": 10, "axes.spines.top": False,
                         "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.3})
    return plt


def _save(plt: Any, fig: Any, path: Path) -> Path:
    """Write ``fig`` to ``path`` whole or not at all, and free it."""
    fig.tight_layout()
    try:
        with staged_file(path) as temp:
            fig.savefig(temp, bbox_inches="tight", format="png")  # the temporary name does not end in .png
    finally:
        plt.close(fig)
    return path


def _k_of(name: str) -> int:
    return int(name.split("@")[1])


def plot_answer_recall(path: Path, baselines: Sequence[tuple[str, Mapping[str, float]]],
                       curves: Sequence[tuple[str, Mapping[str, float]]]) -> Path:
    """Grouped bars: for each cutoff k, the first stage (grey, hatched) then each run after reranking.

    ``baselines`` and ``curves`` are (label, {"R@5": 0.8, ...}) pairs. Bars rather than lines, since
    equal recalls (common at small k) would hide one line behind another.
    """
    plt = _pyplot()
    series = ([(label, recall, True) for label, recall in baselines]
              + [(label, recall, False) for label, recall in curves])
    ks = sorted({_k_of(name) for _, recall, _ in series for name in recall})
    width = 0.8 / max(len(series), 1)
    fig, ax = plt.subplots(figsize=(max(7.2, 1.2 + 0.35 * len(ks) * len(series)), 4.6))
    colour_index = 0
    for i, (label, recall, is_baseline) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(ks))]
        values = [100 * recall.get(f"R@{k}", float("nan")) for k in ks]
        if is_baseline:
            style = {"color": "#d9d9d9", "edgecolor": BASELINE, "hatch": "///"}
        else:
            style = {"color": COLOURS[colour_index % len(COLOURS)], "edgecolor": "white"}
            colour_index += 1
        ax.bar(xs, values, width=width * 0.95, label=label, linewidth=0.6, zorder=3, **style)
    ax.set_xticks(range(len(ks)), [f"R@{k}" for k in ks])
    ax.set_ylabel("answer Recall@k (%)")
    ax.set_ylim(0, 100)
    ax.grid(axis="x", visible=False)
    ax.set_title("Answer recall before (first stage) and after reranking", loc="left")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.09), ncol=2, fontsize=8, frameon=False)
    return _save(plt, fig, path)


class NPoint(NamedTuple):
    """One run of a group that differs only in N: EM, accuracy and the reranking overhead (None if unknown)."""

    n: int
    em: float
    accuracy: float
    overhead: float | None


def plot_n_tradeoff(path: Path, groups: Mapping[str, Sequence[NPoint]]) -> Path:
    """RankRAG Fig. 5 ("Performance v.s. Efficiency"): ``groups`` is label → one :class:`NPoint` per N.

    Left, EM (solid) and accuracy (dashed) against N; right, the time overhead of reranking
    N·t2 / (t1 + t3) of RankRAG §4.3 (:mod:`.efficiency`), which counts calls served from the call
    cache at the seconds first measured, so runs that shared calls are drawn at their own cost.
    """
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 4.2))
    all_n: set[int] = set()
    for i, (label, points) in enumerate(groups.items()):
        points = sorted(points, key=lambda p: p.n)
        ns = [p.n for p in points]
        all_n.update(ns)
        colour = COLOURS[i % len(COLOURS)]
        left.plot(ns, [100 * p.em for p in points], marker="o", color=colour, label=f"{label} · EM")
        left.plot(ns, [100 * p.accuracy for p in points], marker="o", color=colour, linestyle="--",
                  markerfacecolor="white", label=f"{label} · accuracy")
        timed = [p for p in points if p.overhead is not None]
        right.plot([p.n for p in timed], [p.overhead for p in timed], marker="o", color=colour, label=label)
    for ax in (left, right):
        ax.set_xticks(sorted(all_n))
        ax.set_xlabel("N (passages reranked)")
    low, high = left.get_ylim()
    if high - low < 10:  # a flat curve should look flat, not like a cliff on a 0.5-point axis
        middle = (high + low) / 2
        left.set_ylim(max(0, middle - 5), min(100, middle + 5))
    left.set_ylabel("%")
    left.set_title("EM and accuracy against N", loc="left")
    right.set_ylabel("N·t2 / (t1 + t3)")
    right.set_ylim(0, right.get_ylim()[1] * 1.08)
    right.set_title("Time overhead of reranking against N", loc="left")
    left.legend(loc="best", fontsize=8, frameon=False)
    return _save(plt, fig, path)


def plot_judge_scores(path: Path, *, question: str, ids: Sequence[str], scores: Sequence[float],
                      kept: Sequence[bool], holds_answer: Sequence[bool], tau: float, mean: float,
                      judge_n: float, run_label: str) -> Path:
    """Bars of the judge's log-odds per document, best first, kept ones coloured, τ and the mean drawn."""
    plt = _pyplot()
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    fig, ax = plt.subplots(figsize=(max(7.2, 0.45 * len(order) + 3.0), 4.8))
    xs = list(range(len(order)))
    colours = [COLOURS[0] if kept[i] else "#c9c9c9" for i in order]
    ax.bar(xs, [scores[i] for i in order], width=0.7, color=colours, edgecolor="#333333", linewidth=0.5, zorder=3)
    low = min(min(scores), tau, 0.0)
    high = max(max(scores), tau, 0.0)
    span = (high - low) or 1.0
    for x, i in zip(xs, order, strict=True):
        if holds_answer[i]:
            y = scores[i]
            ax.text(x, y + (0.02 * span if y >= 0 else -0.02 * span), "★", ha="center",
                    va="bottom" if y >= 0 else "top", color=COLOURS[1], fontsize=12, zorder=5)
    ax.axhline(tau, color=COLOURS[1], linewidth=1.6, zorder=4)
    if abs(mean - tau) > 1e-9:
        ax.axhline(mean, color="#555555", linewidth=1, linestyle=":", zorder=4)
    ax.axhline(0, color="#333333", linewidth=0.6, zorder=2)
    pad = max(0.0, (4 - len(order)) / 2)  # a list of one or two keeps bars of a normal width
    ax.set_xlim(-0.8 - pad, len(order) - 0.2 + pad)
    # Room for a star above the highest bar and below the lowest one.
    ax.set_ylim(low - (0.12 if min(scores) < 0 else 0.04) * span, high + 0.12 * span)
    ax.set_xticks(xs, [ids[i] if len(ids[i]) <= 16 else ids[i][:15] + "…" for i in order], rotation=40,
                  ha="right", fontsize=8)
    ax.grid(axis="x", visible=False)
    ax.set_ylabel('judge score: log P("Yes") − log P("No")')
    ax.set_xlabel("retrieved documents, highest judge score first")
    wrapped = "\n".join(textwrap.wrap(question, 80)[:2])
    ax.set_title(f"MAIN-RAG judge scores · {run_label}\n{wrapped}", loc="left", fontsize=9.5)
    handles = [Patch(facecolor=COLOURS[0], edgecolor="#333333", label="kept (s ≥ τ)"),
               Patch(facecolor="#c9c9c9", edgecolor="#333333", label="dropped (s < τ)"),
               Line2D([], [], color=COLOURS[1], linewidth=1.6, label=f"τ = mean − {judge_n:g}·std = {tau:.2f}")]
    if abs(mean - tau) > 1e-9:
        handles.append(Line2D([], [], color="#555555", linestyle=":", label=f"mean = {mean:.2f}"))
    handles.append(Line2D([], [], color=COLOURS[1], marker="*", linestyle="", markersize=10,
                          label="holds a gold answer"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return _save(plt, fig, path)


class FrontPoint(NamedTuple):
    """One configuration on the quality-cost plane (:func:`plot_pareto_front`)."""

    label: str
    cost: float
    quality: float
    on_front: bool
    reference: bool = False


def plot_pareto_front(path: Path, points: Sequence[FrontPoint], *, cost_label: str, quality_label: str,
                      title: str) -> Path:
    """Every measured configuration as a dot, the front as a staircase through its points (each
    labelled), vanilla as a star: what each point of quality costs."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.6, 4.8))
    others = [p for p in points if not p.on_front and not p.reference]
    front = sorted((p for p in points if p.on_front), key=lambda p: p.cost)
    ax.scatter([p.cost for p in others], [p.quality for p in others], s=22, color="#b0b0b0", zorder=2,
               label="measured on every tuning question")
    if front:
        ax.step([p.cost for p in front], [p.quality for p in front], where="post", color=COLOURS[0], zorder=3,
                linewidth=1.4)
        ax.scatter([p.cost for p in front], [p.quality for p in front], s=34, color=COLOURS[0], zorder=4,
                   label="Pareto front")
        for p in front:
            short = p.label if len(p.label) <= 34 else p.label[:33] + "…"
            ax.annotate(short, (p.cost, p.quality), textcoords="offset points", xytext=(5, 4), fontsize=7.5)
    for p in points:
        if p.reference:
            ax.scatter([p.cost], [p.quality], s=140, marker="*", color=COLOURS[1], zorder=5,
                       label=f"vanilla (reference): {p.label}")
    ax.set_xlabel(cost_label)
    ax.set_ylabel(quality_label)
    ax.set_title(title, loc="left", fontsize=9.5)
    ax.legend(loc="best", fontsize=8, frameon=False)
    return _save(plt, fig, path)


def relative(path: Path, start: Path) -> str:
    """``path`` as the .md file beside it links it."""
    try:
        return str(path.relative_to(start))
    except ValueError:
        return str(path)


__all__ = ["FrontPoint", "NPoint", "plot_answer_recall", "plot_judge_scores", "plot_n_tradeoff", "plot_pareto_front",
           "relative"]
