"""Named fine-tuning presets: RankRAG's two training stages as the paper runs them (Yu et al., 2024, §5.1).

"For the two-stage instruction tuning, we set the batch size to 128 and train the model for 1000
steps with learning rate 5e-6 in Stage-I. Then, we reduce the learning rate to 3e-7 for 8B and 2e-7
for 70B model, set the batch size to 64, and train the model for 3300 steps (around 1 epoch). We use
the Adam optimizer (Kingma & Ba, 2014) with β1 = 0.9 and β2 = 0.98." (§5.1, Implementation Details)

Both stages fine-tune all weights (the paper mentions no adapter). The batch sizes are global, over
every GPU: a preset fixes ``global_batch`` and the gradient accumulation follows from the per-device
``batch_size`` and the number of processes. What §5.1 leaves unsaid keeps Winnow's defaults: the
learning-rate schedule (linear decay), warm-up (none), weight decay (none: AdamW without decay is
Adam), the maximum length and the seed.

Values given explicitly override a preset's. Two explicit options also set aside a preset value they
would contradict: ``grad_accum`` replaces ``global_batch`` (the batch is then ``batch_size`` ×
``grad_accum`` × processes), and ``epochs`` replaces ``max_steps``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..settings import SettingError

# §5.1, both stages. App. C prints the training prompts as plain "System: … User: … Assistant:"
# text, the framing --profile paper evaluates in (App. D).
PAPER_ADAM = {"adam_beta1": 0.9, "adam_beta2": 0.98, "framing": "plain"}


@dataclass(frozen=True)
class TrainingPreset:
    name: str
    source: str  # where in the paper the values are stated
    summary: str  # one line for --help and `winnow methods`
    values: Mapping[str, Any]


PRESETS: dict[str, TrainingPreset] = {preset.name: preset for preset in (
    TrainingPreset("paper-stage1", "RankRAG §5.1, Stage-I",
                   "full fine-tuning, lr 5e-6, batch 128, 1,000 steps, Adam β 0.9/0.98, plain framing",
                   {"lora": False, "lr": 5e-6, "global_batch": 128, "max_steps": 1000, **PAPER_ADAM}),
    TrainingPreset("paper-stage2-8b", "RankRAG §5.1, Stage-II 8B",
                   "full fine-tuning, lr 3e-7, batch 64, 3,300 steps, Adam β 0.9/0.98, plain framing",
                   {"lora": False, "lr": 3e-7, "global_batch": 64, "max_steps": 3300, **PAPER_ADAM}),
    TrainingPreset("paper-stage2-70b", "RankRAG §5.1, Stage-II 70B",
                   "full fine-tuning, lr 2e-7, batch 64, 3,300 steps, Adam β 0.9/0.98, plain framing",
                   {"lora": False, "lr": 2e-7, "global_batch": 64, "max_steps": 3300, **PAPER_ADAM}),
)}

# An explicit option that sets aside the preset values it would contradict.
SETS_ASIDE = {"grad_accum": ("global_batch",), "epochs": ("max_steps",)}


@dataclass(frozen=True)
class AppliedPreset:
    """What a preset contributed to a run: for run.json, summary.json and the command's summary."""

    name: str
    source: str
    values: dict[str, Any]  # the preset's values that the run uses
    overridden: dict[str, tuple[Any, Any]]  # setting -> (the preset's value, the value used instead)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "values": self.values,
                "overridden": {key: {"preset": old, "used": new} for key, (old, new) in self.overridden.items()}}


def preset(name: str) -> TrainingPreset:
    """The preset called ``name``, or a SettingError listing the known ones."""
    if name not in PRESETS:
        raise SettingError("preset", f"unknown training preset {name!r}", f"known presets: {', '.join(PRESETS)}")
    return PRESETS[name]


def apply_preset(name: str | None, given: Mapping[str, Any]) -> tuple[dict[str, Any], AppliedPreset | None]:
    """The settings values for a run: ``given`` (None meaning "not given") over the preset ``name``."""
    chosen = {key: value for key, value in given.items() if value is not None}
    if name is None:
        return chosen, None
    chosen_preset = preset(name)
    set_aside = {key for option, keys in SETS_ASIDE.items() if option in chosen for key in keys if key not in chosen}
    values = {key: value for key, value in chosen_preset.values.items() if key not in set_aside}
    overridden = {key: (value, chosen.get(key)) for key, value in chosen_preset.values.items()
                  if key in set_aside or (key in chosen and chosen[key] != value)}
    used = {key: value for key, value in values.items() if key not in overridden}
    return {**values, **chosen, "preset": name}, AppliedPreset(name, chosen_preset.source, used, overridden)
