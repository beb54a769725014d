"""The training curve: the trainer's log history as ``curve.csv`` and a plot, ``curve.png``.

Both are rewritten whole (temp file + rename) at every log step, from the trainer's full history,
which a resumed run restores from its checkpoint: the files always describe the whole run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..atomic import staged_file, write_lines
from ..extras import import_extra

COLUMNS = ("step", "epoch", "loss", "learning_rate", "grad_norm", "seconds")


def curve_rows(log_history: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per logged training step (evaluation and summary entries have no ``loss``)."""
    rows = []
    for entry in log_history:
        if "loss" in entry and "step" in entry:
            rows.append({column: entry.get(column, "") for column in COLUMNS})
    return rows


def write_curve_csv(rows: Sequence[dict[str, Any]], path: Path) -> None:
    lines = [",".join(COLUMNS)]
    lines += [",".join(_cell(row[column]) for column in COLUMNS) for row in rows]
    write_lines(path, lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def moving_average(values: Sequence[float], window: int) -> list[float]:
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot_curve(rows: Sequence[dict[str, Any]], path: Path, *, title: str) -> None:
    """Loss per step with its moving average, and the learning rate on a second axis."""
    matplotlib = import_extra("matplotlib", "train", "the training curve plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [int(r["step"]) for r in rows]
    losses = [float(r["loss"]) for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, losses, color="#9bb7d4", linewidth=1, label="loss (per step)")
    if len(losses) >= 5:
        window = max(2, len(losses) // 20)
        ax.plot(steps, moving_average(losses, window), color="#1f4e79", linewidth=2,
                label=f"moving average ({window} steps)")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss on the assistant's last turn")
    ax.set_title(title)
    rates = [r["learning_rate"] for r in rows]
    if all(isinstance(rate, (int, float)) for rate in rates) and rates:
        other = ax.twinx()
        other.plot(steps, rates, color="#c0504d", linewidth=1, linestyle="--", label="learning rate")
        other.set_ylabel("learning rate")
        lines, labels = ax.get_legend_handles_labels()
        more, more_labels = other.get_legend_handles_labels()
        ax.legend(lines + more, labels + more_labels, loc="upper right", fontsize=8)
    else:
        ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    try:
        with staged_file(path) as temp:
            fig.savefig(temp, dpi=110, format="png")  # the temporary name does not end in .png
    finally:
        plt.close(fig)


def write_curve(log_history: Sequence[dict[str, Any]], folder: Path, *, title: str) -> int:
    """Write ``curve.csv`` and ``curve.png`` into ``folder``; returns how many steps they hold."""
    rows = curve_rows(log_history)
    write_curve_csv(rows, folder / "curve.csv")
    if rows:
        plot_curve(rows, folder / "curve.png", title=title)
    return len(rows)
