"""Supervised fine-tuning on a blend: RankRAG's instruction tuning (Yu et al., 2024, §4.1-4.2).

"For each sample … we use the previous turns of conversation between the user and the assistant as
the context, and compute the loss only at the last response from the assistant" (§4.1): every
example is tokenised as prompt (all turns but the last) and completion (the last assistant turn),
and only the completion's tokens carry labels. The ``framing`` setting is evaluation's: ``chat``
renders the prompt with the model's own chat template plus the generation prompt (exactly the tokens
the transformers backend sends at inference); ``plain`` renders App. C's "System: … User: …
Assistant:" text, which App. D's prompts continue at inference (:func:`winnow.prompts.plain_layout`,
the one function both use), the completion being " target" and the end-of-text token. The framing is
recorded in ``winnow-model.json``, and a method run in the other framing is refused
(:func:`winnow.models.loading.check_trained_framing`): a model is scored in the format it learnt.

Training runs on transformers' Trainer through TRL's ``SFTTrainer``, with a LoRA adapter (PEFT) by
default or all weights. The run folder holds ``checkpoints/`` (resumed automatically: the same
command continues an interrupted run), ``curve.csv`` and ``curve.png``, ``run.json`` (settings, base
and data checksums) and, at the end, ``model/`` (the adapter or the weights, the tokenizer and
``winnow-model.json``), which ``--backend transformers --model RUN_DIR`` loads. The same command
runs on several GPUs under ``accelerate launch`` or ``torchrun`` (see docs/training.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar

from ..atomic import staged_folder, write_json
from ..corpus.jsonl import read_json_lines
from ..errors import InputError, WinnowError
from ..extras import require
from ..models.loading import MODEL_RECORD, TRAINED_MODEL_DIR, load_model, locate_model, quiet_libraries
from ..prompts import FRAMINGS
from ..settings import Settings, at_least
from ..version import __version__
from .blend import TRAIN_FILE
from .curves import write_curve
from .examples import plain_example
from .presets import AppliedPreset, preset

RUN_RECORD = "run.json"
CHECKPOINTS = "checkpoints"
TOO_LONG = "longer than --max-length tokens"
# Settings that may change when a run is continued (the base model and the blend are compared by
# checksum, not by path); any other change means a different run.
RESUMABLE_CHANGES = {"max_steps", "epochs", "save_steps", "threads", "resume", "out", "data", "base", "preset"}
DEFAULT_LR = {"lora": 2e-4, "full": 1e-5}


@dataclass
class SFTSettings(Settings):
    """The settings of one fine-tuning run; :mod:`.presets` holds the paper's (RankRAG §5.1)."""

    owner: ClassVar[str] = "winnow train sft"

    base: str
    data: str
    out: str
    lora: bool = True
    max_steps: int | None = None  # None: `epochs` passes over the blend
    epochs: float = 1.0
    lr: float | None = None  # None: DEFAULT_LR for LoRA or full fine-tuning
    batch_size: int = 4  # per device
    grad_accum: int | None = None  # None: 1, or what global_batch asks for
    global_batch: int | None = None  # examples per optimizer step over every process
    max_length: int = 2048
    seed: int = 0
    save_steps: int = 50
    warmup_steps: int = 0
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    # Adam's moment decay rates; transformers' defaults (AdamW, no weight decay: Adam).
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    threads: int | None = None
    limit: int | None = None  # train on the first N examples of the blend only
    resume: bool = True
    preset: str | None = None  # the preset the values came from (a label: the values are above)
    # How examples are rendered: "chat" (the model's chat template) or "plain" (App. C's text), as
    # evaluation's framing setting; the paper presets train plain, as --profile paper evaluates.
    framing: str = "chat"

    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else DEFAULT_LR["lora" if self.lora else "full"]

    def check(self) -> None:
        for name in ("base", "data", "out"):
            self.require(bool(getattr(self, name).strip()), name, f"setting {name!r} must not be empty")
        at_least(self, 1, "batch_size", "save_steps", "lora_r", "lora_alpha")
        at_least(self, 0, "warmup_steps", "seed")
        at_least(self, 16, "max_length")
        for name in ("max_steps", "grad_accum", "global_batch", "threads", "limit"):
            value = getattr(self, name)
            self.require(value is None or value >= 1, name, f"setting {name!r} must be at least 1 (got {value})")
        for name in ("epochs", "lr"):
            value = getattr(self, name)
            self.require(value is None or value > 0, name, f"setting {name!r} must be positive (got {value})")
        for name in ("adam_beta1", "adam_beta2", "lora_dropout"):
            value = getattr(self, name)
            self.require(0 <= value < 1, name, f"setting {name!r} must be in [0, 1) (got {value})")
        self.require(self.framing in FRAMINGS, "framing", f"unknown framing {self.framing!r}",
                     f"choose one of: {', '.join(FRAMINGS)}")
        if self.preset is not None:
            preset(self.preset)  # a known name, or a SettingError listing them

    def accumulation(self, processes: int) -> int:
        """Gradient accumulation steps: ``grad_accum``, or ``global_batch`` over ``batch_size`` ×
        ``processes`` (which must divide it), or 1."""
        if self.global_batch is None:
            return self.grad_accum or 1
        per_step = self.batch_size * processes
        steps, rest = divmod(self.global_batch, per_step)
        self.require(steps >= 1 and rest == 0, "global_batch",
                     f"global batch {self.global_batch} is not a multiple of batch_size {self.batch_size} × "
                     f"{processes} process(es)", "choose a batch_size (per device) that divides it")
        self.require(self.grad_accum in (None, steps), "grad_accum",
                     f"grad_accum {self.grad_accum} contradicts global_batch {self.global_batch} "
                     f"(batch_size {self.batch_size} × {processes} process(es) needs {steps})",
                     "give one of them")
        return steps

    def resolved(self, processes: int) -> SFTSettings:
        """These settings with the accumulation worked out, as a run records them."""
        return replace(self, grad_accum=self.accumulation(processes))


def process_count() -> int:
    """Processes training together: torchrun and accelerate set WORLD_SIZE; otherwise one."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def describe_run(settings: SFTSettings, applied: AppliedPreset | None, processes: int) -> str:
    """One line naming the preset (if any) and the values that matter for reproducing a run."""
    accumulation = settings.accumulation(processes)
    batch = settings.batch_size * accumulation * processes
    steps = f"{settings.max_steps:,} steps" if settings.max_steps is not None else f"{settings.epochs:g} epoch(s)"
    values = (f"{'LoRA' if settings.lora else 'full'} fine-tuning, {settings.framing} framing, "
              f"lr {settings.learning_rate:g}, batch {batch} "
              f"({settings.batch_size} per device × {accumulation} accumulated × {processes} process(es)), {steps}, "
              f"Adam β1 {settings.adam_beta1:g} β2 {settings.adam_beta2:g}")
    if applied is None:
        return f"no preset: {values}"
    line = f"preset {applied.name} ({applied.source}): {values}"
    if applied.overridden:
        line += "; overridden: " + ", ".join(f"{key} {old} -> {'unset' if new is None else new}"
                                             for key, (old, new) in applied.overridden.items())
    return line


@dataclass
class TokenisedBlend:
    input_ids: list[list[int]]
    completion_mask: list[list[int]]
    components: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    prompt_mismatch: int = 0  # examples whose prompt tokens were not a prefix of prompt + completion

    @property
    def tokens(self) -> int:
        return sum(len(ids) for ids in self.input_ids)

    @property
    def trained_tokens(self) -> int:
        return sum(sum(mask) for mask in self.completion_mask)


@dataclass
class SFTReport:
    out: Path
    steps: int
    resumed_from: int
    examples: int
    first_loss: float | None
    last_loss: float | None
    seconds: float
    tokens: int
    trained_tokens: int
    skipped: dict[str, int]


StepHook = Callable[[int, int, dict[str, Any]], None]  # (step, max steps, latest log) after each step


def read_blend(data: Path, limit: int | None = None, framing: str = "chat") -> list[dict[str, Any]]:
    """The rows of a blend folder's ``train.jsonl``, checked (a bad line names the file and line).

    The plain framing needs to know where a row's context ends (``context_chars``, written by
    ``winnow train blend``); a row of a passage task without it is from an older blend."""
    path = data / TRAIN_FILE if data.is_dir() else data
    if not path.is_file():
        raise WinnowError(f"no blend at {data}: {path} is missing", "make one with `winnow train blend`")
    rows = []
    hint = 'each line must be {"id", "component", "messages": [..., {"role": "assistant", ...}]}'
    for line, row in read_json_lines(path, hint=hint):
        messages = row.get("messages") if isinstance(row, dict) else None
        if (not isinstance(messages, list) or len(messages) < 2 or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages)):
            raise InputError(path, "messages must be a list of {\"role\", \"content\"} turns", line=line,
                             field="messages", hint=hint)
        if messages[-1]["role"] != "assistant":
            raise InputError(path, "the last turn must be the assistant's (the target)", line=line,
                             field="messages", hint=hint)
        context_chars = row.get("context_chars", 0)
        if not isinstance(context_chars, int) or isinstance(context_chars, bool) or context_chars < 0:
            raise InputError(path, f"context_chars must be a count of characters (got {context_chars!r})",
                             line=line, field="context_chars")
        if framing == "plain" and "context_chars" not in row and row.get("kind", "sft") != "sft":
            raise InputError(path, "the row does not say where its context ends, which the plain framing "
                                   "sets apart", line=line, field="context_chars",
                             hint="the blend was built by an older winnow: build it again with `winnow train "
                                  "blend`, or train with --framing chat")
        rows.append(row)
        if limit is not None and len(rows) >= limit:
            break
    if not rows:
        raise InputError(path, "the blend holds no examples")
    return rows


def tokenise(rows: list[dict[str, Any]], tokenizer: Any, max_length: int, framing: str = "chat") -> TokenisedBlend:
    """Prompt and completion tokens for each row in ``framing``; the completion mask marks the last
    assistant turn."""
    out = TokenisedBlend([], [])
    for row in rows:
        if framing == "plain":
            prompt_ids, full_ids = plain_ids(tokenizer, row["messages"], row.get("context_chars", 0))
        else:
            prompt, target = row["messages"][:-1], row["messages"][-1]
            prompt_ids = _chat_ids(tokenizer, prompt, generation_prompt=True)
            full_ids = _chat_ids(tokenizer, [*prompt, target], generation_prompt=False)
        shared = 0
        while shared < min(len(prompt_ids), len(full_ids)) and prompt_ids[shared] == full_ids[shared]:
            shared += 1
        if shared < len(prompt_ids):
            out.prompt_mismatch += 1  # the template renders the prompt differently when an answer follows
        if len(full_ids) > max_length:
            out.skipped[TOO_LONG] += 1
            continue
        out.input_ids.append(full_ids)
        out.completion_mask.append([0] * shared + [1] * (len(full_ids) - shared))
        out.components[row.get("component", "?")] += 1
    return out


def plain_ids(tokenizer: Any, messages: list[dict[str, str]], context_chars: int = 0) -> tuple[list[int], list[int]]:
    """The plain framing's prompt tokens (as the transformers backend tokenizes a plain prompt: the
    text with the tokenizer's special tokens) and the whole example's, ending in end-of-text so the
    model learns where its answer stops."""
    prompt, completion = plain_example(messages, context_chars)
    prompt_ids = list(tokenizer(prompt, add_special_tokens=True, verbose=False)["input_ids"])
    full_ids = list(tokenizer(prompt + completion, add_special_tokens=True, verbose=False)["input_ids"])
    if tokenizer.eos_token_id is not None and (not full_ids or full_ids[-1] != tokenizer.eos_token_id):
        full_ids.append(tokenizer.eos_token_id)
    return prompt_ids, full_ids


def _chat_ids(tokenizer: Any, messages: list[dict[str, str]], *, generation_prompt: bool) -> list[int]:
    encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=True,
                                            return_dict=True)
    return list(encoded["input_ids"])


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _run_record(settings: SFTSettings, base: Any, data_file: Path, applied: AppliedPreset | None) -> dict[str, Any]:
    return {"format": 1, "settings": settings.to_dict(), "learning_rate": settings.learning_rate,
            "preset": applied.to_dict() if applied else None,
            "base": {"spec": settings.base, "name": base.name, "sha256": base.sha256},
            "data": {"path": str(data_file), "sha256": file_sha256(data_file)}, "built_by": f"winnow {__version__}"}


def _prepare_out(out: Path, record: dict[str, Any], *, overwrite: bool) -> bool:
    """Create the run folder or check it belongs to this run; True when there is progress to resume."""
    existing = out / RUN_RECORD
    if out.exists() and not existing.is_file() and any(out.iterdir()):
        raise WinnowError(f"{out} exists and is not a training run folder", "choose another --out")
    if existing.is_file():
        if overwrite:
            shutil.rmtree(out)
        else:
            old = json.loads(existing.read_text(encoding="utf-8"))
            differences = _differences(old, record)
            if differences:
                raise WinnowError(f"{out} holds a run with other settings ({', '.join(differences)})",
                                  "pass --overwrite to start afresh, or choose another --out")
    write_json(out / RUN_RECORD, record)
    return (out / CHECKPOINTS).is_dir() and any((out / CHECKPOINTS).glob("checkpoint-*"))


def _differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    found = []
    # A run recorded before a setting existed ran with that setting's default.
    defaults = {f.name: f.default for f in fields(SFTSettings) if f.init and f.default is not MISSING}
    old_settings = {**defaults, **old.get("settings", {})}
    for key in set(old_settings) | set(new["settings"]):
        if key not in RESUMABLE_CHANGES and old_settings.get(key) != new["settings"].get(key):
            found.append(key)
    for part in ("base", "data"):
        if old.get(part, {}).get("sha256") != new[part]["sha256"]:
            found.append(f"{part} checksum")
    return sorted(found)


def train_sft(settings: SFTSettings, *, overwrite: bool = False, on_step: StepHook | None = None,
              on_status: Callable[[str], None] | None = None, applied_preset: AppliedPreset | None = None) -> SFTReport:
    """Fine-tune ``settings.base`` on the blend ``settings.data`` into ``settings.out``.

    ``applied_preset`` (from :func:`.presets.apply_preset`) is recorded in run.json and summary.json.
    """
    require("train", "winnow train sft")
    started = time.perf_counter()
    settings.check()
    settings = settings.resolved(process_count())
    status = on_status or (lambda message: None)
    out, data = Path(settings.out).expanduser(), Path(settings.data).expanduser()
    rows = read_blend(data, settings.limit, settings.framing)
    base = locate_model(settings.base)
    data_file = data / TRAIN_FILE if data.is_dir() else data
    record = _run_record(settings, base, data_file, applied_preset)
    import torch

    if settings.threads:
        torch.set_num_threads(settings.threads)
    quiet_libraries()
    args = _arguments(settings, out)  # under torchrun/accelerate this joins the process group
    # One process prepares the folder (and only it may delete an old run); the others then find
    # the same record and the same checkpoints, so every process makes the same resume decision.
    with args.main_process_first(desc="preparing the run folder"):
        resume = _prepare_out(out, record, overwrite=overwrite and args.process_index == 0) and settings.resume
    finished = _finished_run(out, settings) if resume else None
    if finished is not None:
        status(f"already trained: {finished.steps} steps")
        return finished
    status(f"loading {base.name}")
    model, tokenizer = load_model(base)
    status(f"tokenising {len(rows)} examples")
    blend = tokenise(rows, tokenizer, settings.max_length, settings.framing)
    if not blend.input_ids:
        raise WinnowError(f"every example is longer than --max-length {settings.max_length} tokens",
                          "raise --max-length")
    trainer = _trainer(settings, args, model, tokenizer, blend, out, on_step)
    checkpoint = None
    if resume:
        from transformers.trainer_utils import get_last_checkpoint

        checkpoint = get_last_checkpoint(str(out / CHECKPOINTS))
        status(f"resuming from {Path(checkpoint).name}")
    resumed_from = int(checkpoint.rsplit("-", 1)[-1]) if checkpoint else 0
    status("training")
    trainer.train(resume_from_checkpoint=checkpoint)
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    if trainer.is_world_process_zero():
        _save_model(trainer, tokenizer, out, record, settings, blend)
        write_curve(trainer.state.log_history, out, title=f"{base.name}: {'LoRA' if settings.lora else 'full'} "
                                                          f"fine-tuning on {data.name}")
    report = SFTReport(out, trainer.state.global_step, resumed_from, len(blend.input_ids),
                       losses[0] if losses else None, losses[-1] if losses else None,
                       time.perf_counter() - started, blend.tokens, blend.trained_tokens, dict(blend.skipped))
    if trainer.is_world_process_zero():
        summary = {**asdict(report), "out": str(out), "components": dict(blend.components),
                   "prompt_not_prefix": blend.prompt_mismatch, "preset": record["preset"],
                   "settings": record["settings"]}
        write_json(out / "summary.json", summary)
    return report


def _finished_run(out: Path, settings: SFTSettings) -> SFTReport | None:
    """The report of a run that already reached ``max_steps`` and saved its model, else None.

    Resuming the Trainer from a checkpoint at ``max_steps`` would still take one more optimiser
    step (and change the model), so a finished run is not handed to it again.
    """
    summary_file = out / "summary.json"
    if settings.max_steps is None or not summary_file.is_file() or not (out / "model").is_dir():
        return None
    summary = json.loads(summary_file.read_text(encoding="utf-8"))
    if summary.get("steps", 0) < settings.max_steps:
        return None
    known = {f.name for f in fields(SFTReport)}
    report = SFTReport(**{key: value for key, value in summary.items() if key in known})
    report.out = out
    return report


def _arguments(settings: SFTSettings, out: Path) -> Any:
    import torch
    from trl.trainer.sft_config import SFTConfig  # the package's lazy __init__ exports it untyped

    # TRL asks for bf16 by default; CPUs train in float32, GPUs in bf16 where they support it.
    bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    args = SFTConfig(
        bf16=bf16,
        output_dir=str(out / CHECKPOINTS),
        max_steps=settings.max_steps if settings.max_steps is not None else -1,
        num_train_epochs=settings.epochs,
        per_device_train_batch_size=settings.batch_size,
        gradient_accumulation_steps=settings.accumulation(process_count()),
        learning_rate=settings.learning_rate,
        adam_beta1=settings.adam_beta1,  # §5.1: Adam with β1 = 0.9 and β2 = 0.98 in the paper presets
        adam_beta2=settings.adam_beta2,
        warmup_steps=settings.warmup_steps,
        seed=settings.seed,
        data_seed=settings.seed,
        logging_steps=1,
        save_strategy="steps",
        save_steps=settings.save_steps,
        save_total_limit=2,
        report_to=[],
        disable_tqdm=True,
        completion_only_loss=True,  # loss on the last assistant turn only (§4.1)
        max_length=None,  # over-long examples were left out and counted, never cut
        packing=False,
        dataloader_num_workers=0,
        dataloader_pin_memory=torch.cuda.is_available(),
    )
    return args


def _trainer(settings: SFTSettings, args: Any, model: Any, tokenizer: Any, blend: TokenisedBlend, out: Path,
             on_step: StepHook | None) -> Any:
    from datasets import Dataset
    from trl.trainer.sft_trainer import SFTTrainer  # the package's lazy __init__ exports it untyped

    peft_config = None
    if settings.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=settings.lora_r, lora_alpha=settings.lora_alpha, lora_dropout=settings.lora_dropout,
                                 target_modules="all-linear", task_type="CAUSAL_LM")
    dataset = Dataset.from_dict({"input_ids": blend.input_ids, "completion_mask": blend.completion_mask})
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                         peft_config=peft_config)
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # progress and loss reach the user through on_step
    trainer.add_callback(_curve_callback(out, on_step))
    return trainer


def _curve_callback(out: Path, on_step: StepHook | None) -> Any:
    from transformers import TrainerCallback

    # transformers is not analysed (pyproject's mypy overrides), so its base class is Any.
    class CurveCallback(TrainerCallback):  # type: ignore[misc]
        """Times every logged step (cumulated across resumes) and rewrites the curve files."""

        def __init__(self) -> None:
            self.started = time.perf_counter()
            self.offset: float | None = None

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
                   **kwargs: Any) -> None:
            if self.offset is None:  # a resumed run continues the clock of the run it resumes
                earlier = [e["seconds"] for e in state.log_history[:-1] if "seconds" in e]
                self.offset = earlier[-1] if earlier else 0.0
            if state.log_history and "loss" in state.log_history[-1]:
                state.log_history[-1]["seconds"] = round(self.offset + time.perf_counter() - self.started, 2)
            if state.is_world_process_zero:
                write_curve(state.log_history, out, title="training loss")
            if on_step is not None and logs is not None:
                on_step(state.global_step, state.max_steps, dict(logs))

    return CurveCallback()


def _save_model(trainer: Any, tokenizer: Any, out: Path, record: dict[str, Any], settings: SFTSettings,
                blend: TokenisedBlend) -> None:
    """Write ``model/`` whole or not at all: the adapter (or weights), tokenizer and winnow-model.json."""
    with staged_folder(out / TRAINED_MODEL_DIR) as temp:
        trainer.model.save_pretrained(temp)
        tokenizer.save_pretrained(temp)
        model_record = {"format": 1, "finetune": "lora" if settings.lora else "full", "base": record["base"],
                        "data": record["data"], "steps": trainer.state.global_step,
                        "learning_rate": settings.learning_rate, "examples": len(blend.input_ids),
                        "preset": (record["preset"] or {}).get("name"), "framing": settings.framing,
                        "built_by": f"winnow {__version__}"}
        (temp / MODEL_RECORD).write_text(json.dumps(model_record, indent=2) + "\n", encoding="utf-8")
