"""``winnow train blend`` and ``winnow train sft``: RankRAG instruction tuning (§4.1-4.2, App. B-C).

The blend needs nothing beyond the core install; fine-tuning needs the ``[train]`` extra, imported
only inside the command body.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich import box
from rich.table import Table

from ..extras import require
from ..settings import SettingError
from .common import app, err, out

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from ..training.sft import SFTReport

train_app = typer.Typer(no_args_is_help=True, help="RankRAG instruction tuning: build the Stage-II blend, "
                                                    "fine-tune a model on it.")
app.add_typer(train_app, name="train")


def _bar() -> Progress:
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    from ..progress import progress_bar

    return progress_bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=err, transient=True)


@train_app.command("blend")
def blend(
    config: Annotated[Path, typer.Option("--config", "-c", help="Blend file (TOML or YAML): components, ratios, "
                                                                "seed (see docs/training.md).")],
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Folder to create (train.jsonl, stats.json).")],
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an earlier blend.")] = False,
) -> None:
    """Build the Stage-II blend in the unified chat format, mixed by Appendix B's ratios."""
    from ..training.blend import build_blend

    bar = _bar()
    tasks: dict[str, TaskID] = {}

    def progress(what: str, done: int, total: int | None) -> None:
        if total is None:  # a finished step: say so and move on
            bar.console.print(f"  {what}", highlight=False)
            return
        key = what.split(" against ")[0]
        if key not in tasks:
            tasks[key] = bar.add_task(what, total=total)
        bar.update(tasks[key], completed=done)

    with bar:
        report = build_blend(config, out_dir, overwrite=overwrite, progress=progress)
    stats = report.stats
    # Light borders, headers that wrap and figures that fold rather than crop: whole at 80 columns.
    table = Table(title=f"Blend {report.out}: {stats['size']:,} examples (seed {stats['seed']})", title_justify="left",
                  box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False)
    for column in ("component", "kind", "share", "pool", "taken", "repeats", "skipped", "dropped: in eval sets"):
        table.add_column(column, justify="left" if column in ("component", "kind", "skipped") else "right",
                         overflow="fold", no_wrap=column == "component")
    for name, c in stats["components"].items():
        skipped = "\n".join(f"{reason}: {count:,}" for reason, count in c["skipped"].items()) or "-"
        table.add_row(name, c["kind"], f"{c['share']:.3f}", f"{c['pool']:,}", f"{c['taken']:,}", f"{c['repeats']:,}",
                      skipped, f"{sum(c['contaminated'].values()):,}")
    out.print(table)
    contamination = stats["contamination"]
    err.print(f"contamination check against {len(contamination['eval_sets'])} evaluation sets "
              f"({sum(contamination['eval_sets'].values()):,} questions): {contamination['dropped_total']:,} "
              f"examples dropped; wrote {report.out / 'train.jsonl'} and stats.json in {report.seconds:.1f} s "
              "(no LLM calls)")


PRESET_HELP = ("Start from a named recipe; options given explicitly override it. "
               "paper-stage1: RankRAG Stage-I SFT (§4.1, §5.1): full, lr 5e-6, batch 128, 1,000 steps; "
               "paper-stage2-8b: Stage-II (§4.2, §5.1): full, lr 3e-7, batch 64, 3,300 steps; "
               "paper-stage2-70b: the same with lr 2e-7. All three: Adam β1 0.9, β2 0.98, --framing plain "
               "(App. C); the batch is global (--global-batch).")
FRAMING_HELP = ("How examples are rendered, as evaluation's --framing: chat (the model's chat template) or plain "
                "(RankRAG App. C's 'System: … User: … Assistant:' text, what --profile paper evaluates) "
                "\\[default: chat; the paper presets: plain]. Recorded with the model: evaluating it in the "
                "other framing is refused.")


@train_app.command("sft")
def sft(
    base: Annotated[str, typer.Option("--base", help="Model to tune: a registry name or .gguf file (dequantised), "
                                                     "a Hugging Face model folder, or an earlier run folder.")],
    data: Annotated[Path, typer.Option("--data", help="Blend folder from `winnow train blend` (or its train.jsonl).")],
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Run folder: checkpoints, curve, model/.")],
    preset: Annotated[Optional[str], typer.Option("--preset", help=PRESET_HELP)] = None,
    framing: Annotated[Optional[str], typer.Option("--framing", help=FRAMING_HELP)] = None,
    lora: Annotated[Optional[bool], typer.Option("--lora/--full", help="Train a LoRA adapter or all weights "
                                                                       "\\[default: LoRA].")] = None,
    max_steps: Annotated[Optional[int], typer.Option("--max-steps", min=1, help="Optimizer steps "
                                                                                "\\[default: one epoch].")] = None,
    epochs: Annotated[Optional[float], typer.Option("--epochs", min=0.0, help="Passes over the blend when "
                                                                              "--max-steps is not given "
                                                                              "\\[default: 1].")] = None,
    lr: Annotated[Optional[float], typer.Option("--lr", help="Peak learning rate \\[default: 2e-4 LoRA, "
                                                             "1e-5 full].")] = None,
    batch_size: Annotated[Optional[int], typer.Option("--batch-size", min=1, help="Examples per device and "
                                                                                  "micro-step \\[default: 4].")] = None,
    grad_accum: Annotated[Optional[int], typer.Option("--grad-accum", min=1, help="Gradient accumulation steps "
                                                                                  "\\[default: 1, or what "
                                                                                  "--global-batch needs].")] = None,
    global_batch: Annotated[Optional[int], typer.Option("--global-batch", min=1, help="Examples per optimizer "
                                                                                      "step over every device; "
                                                                                      "sets --grad-accum.")] = None,
    adam_beta1: Annotated[Optional[float], typer.Option("--adam-beta1", help="Adam β1 \\[default: 0.9].")] = None,
    adam_beta2: Annotated[Optional[float], typer.Option("--adam-beta2", help="Adam β2 \\[default: 0.999; "
                                                                             "the paper: 0.98].")] = None,
    max_length: Annotated[Optional[int], typer.Option("--max-length", min=16, help="Longer examples are left out "
                                                                                   "(and counted) "
                                                                                   "\\[default: 2048].")] = None,
    save_steps: Annotated[Optional[int], typer.Option("--save-steps", min=1, help="Checkpoint every N steps "
                                                                                  "\\[default: 50].")] = None,
    warmup_steps: Annotated[Optional[int], typer.Option("--warmup-steps", min=0, help="\\[default: 0]")] = None,
    lora_r: Annotated[Optional[int], typer.Option("--lora-r", min=1, help="\\[default: 16]")] = None,
    lora_alpha: Annotated[Optional[int], typer.Option("--lora-alpha", min=1, help="\\[default: 32]")] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="\\[default: 0]")] = None,
    threads: Annotated[Optional[int], typer.Option("--threads", min=1, help="CPU threads for torch.")] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", min=1, help="Use only the first N examples.")] = None,
    resume: Annotated[bool, typer.Option("--resume/--no-resume", help="Continue from the last checkpoint in "
                                                                      "--out.")] = True,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Delete an earlier run in --out first.")] = False,
) -> None:
    """Fine-tune a model on a blend: loss on the last assistant turn only (RankRAG §4.1).

    LoRA with small steps is the default, for CPUs; --preset names the paper's recipes.
    """
    from ..training.presets import apply_preset

    given = dict(base=base, data=str(data), out=str(out_dir), framing=framing, lora=lora, max_steps=max_steps,
                 epochs=epochs, lr=lr, batch_size=batch_size, grad_accum=grad_accum, global_batch=global_batch,
                 adam_beta1=adam_beta1, adam_beta2=adam_beta2, max_length=max_length, seed=seed, save_steps=save_steps,
                 warmup_steps=warmup_steps, lora_r=lora_r, lora_alpha=lora_alpha, threads=threads, limit=limit,
                 resume=resume)
    require("train", "winnow train sft")  # before the progress bar takes the terminal
    from ..training.sft import SFTSettings, describe_run, process_count, train_sft

    processes = process_count()
    try:
        values, applied = apply_preset(preset, given)
        settings = SFTSettings.from_values(values)
        err.print(describe_run(settings, applied, processes), highlight=False)  # checks the batch arithmetic
    except SettingError as exc:  # name the option the user typed
        raise SettingError(exc.setting, f"--{exc.setting.replace('_', '-')}: {exc.message}", exc.hint) from exc
    bar = _bar()
    task = bar.add_task("training", total=None)

    def on_step(step: int, total: int, logs: dict[str, Any]) -> None:
        loss = f" loss {logs['loss']:.4f}" if "loss" in logs else ""
        bar.update(task, completed=step, total=total, description=f"training{loss}")

    started = time.perf_counter()
    with bar:
        report = train_sft(settings, overwrite=overwrite, on_step=on_step, applied_preset=applied,
                           on_status=lambda message: bar.update(task, description=message))
    _print_trained(report, time.perf_counter() - started)
    err.print(describe_run(settings, applied, processes), highlight=False)
    err.print(f"model in {report.out / 'model'} (use it: --backend transformers --model {report.out}); "
              f"curve in {report.out / 'curve.png'}")


def _print_trained(report: SFTReport, seconds: float) -> None:
    """One line of what ``winnow train sft`` did: steps, examples, target tokens, loss, time, what was left out."""
    skipped = "; ".join(f"{reason}: {count}" for reason, count in report.skipped.items())
    resumed = f" (resumed at step {report.resumed_from})" if report.resumed_from else ""
    loss = (f"loss {report.first_loss:.4f} -> {report.last_loss:.4f}" if report.first_loss is not None
            else "no step logged")
    err.print(f"trained {report.steps} steps{resumed} on {report.examples:,} examples "
              f"({report.trained_tokens:,} target tokens of {report.tokens:,}); {loss}; "
              f"{seconds:.0f} s" + (f"; left out {skipped}" if skipped else ""))


@train_app.command("export")
def export(
    trained: Annotated[Path, typer.Argument(help="The `winnow train sft` output (its --out folder).")],
    model_file: Annotated[Path, typer.Argument(help="The file it was converted to, e.g. by llama.cpp's "
                                                    "convert_hf_to_gguf.py: MODEL.gguf.")],
) -> None:
    """Write the training record (the framing it learnt) beside a converted model, MODEL.gguf.winnow-model.json,
    so evaluating that file in-process, or through a server that names it, checks the framing."""
    from ..models.loading import write_export_record

    written = write_export_record(trained, model_file)
    err.print(f"wrote {written}: {model_file.name} is checked against the framing it was trained in")
