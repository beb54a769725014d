"""Models for fine-tuning and for the transformers backend: where they are, what they are, loading them.

A model is named by

* a Winnow registry name, a ``.gguf`` path or a hub GGUF id (``hf:owner/repo/file.gguf``): loaded
  through transformers' GGUF support, dequantised to float32. The dequantised weights are kept
  once in ``<cache>/transformers/`` (keyed by the GGUF's sha256), since converting the GGUF again
  costs far more than reading them back;
* a Hugging Face model folder (``config.json`` and weights);
* a fine-tuned model from ``winnow train sft`` (the run folder or its ``model/`` folder) or any PEFT
  LoRA adapter folder (``adapter_config.json``), loaded on its base model.

Every model has a sha256 identity (the GGUF's, or one over the folder's files, combined with the
base's for an adapter), which the LLM call cache keys on: two different fine-tunes never share
cached answers.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..atomic import staged_folder, write_json
from ..errors import ModelError, WinnowError
from ..extras import require
from ..lock import output_lock
from ..paths import cache_root
from .gguf_metadata import gguf_string

TRAINED_MODEL_DIR = "model"
MODEL_RECORD = "winnow-model.json"
#: A model converted from a ``winnow train sft`` output carries its training record beside it:
#: ``MODEL.gguf`` has ``MODEL.gguf.winnow-model.json`` (``winnow train export``), or, written by a
#: converter, the GGUF metadata key below. A served folder keeps its own ``winnow-model.json``.
EXPORT_RECORD_SUFFIX = f".{MODEL_RECORD}"
GGUF_FRAMING_KEY = "winnow.framing"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".json", ".model", ".txt", ".jinja")


@dataclass(frozen=True)
class ModelSource:
    """A located model: ``kind`` is ``gguf`` (``path`` is the file), ``hf`` (a folder) or ``adapter``
    (a LoRA folder on ``base``)."""

    name: str
    kind: str
    path: Path
    sha256: str
    base: ModelSource | None = None
    record: dict[str, Any] | None = None  # winnow-model.json of a fine-tune


def locate_model(spec: str) -> ModelSource:
    """The model ``spec`` names (see the module notes); :class:`ModelError` if it names none."""
    path = Path(spec).expanduser()
    if path.is_dir():
        if (path / TRAINED_MODEL_DIR / MODEL_RECORD).is_file():
            path = path / TRAINED_MODEL_DIR
        record = _read_record(path)
        if (path / "adapter_config.json").is_file():
            base_spec = (record or {}).get("base", {}).get("spec") or _adapter_base(path)
            base = locate_model(base_spec)
            expected = (record or {}).get("base", {}).get("sha256")
            if expected and expected != base.sha256:
                raise ModelError(f"{path} was trained on {base_spec} with sha256 {expected}, but that model now has "
                                 f"sha256 {base.sha256}", "use the base model it was trained on")
            sha = hashlib.sha256(f"{base.sha256}:{folder_sha256(path)}".encode()).hexdigest()
            return ModelSource(_display_name(path, record), "adapter", path, sha, base, record)
        if (path / "config.json").is_file():
            return ModelSource(_display_name(path, record), "hf", path, folder_sha256(path), None, record)
        raise ModelError(f"{path} is neither a Hugging Face model folder (config.json) nor a LoRA adapter "
                         "(adapter_config.json) nor a `winnow train sft` output",
                         "give a model folder, a training output folder, a registry name or a .gguf file")
    from .resolve import resolve_model

    resolved = resolve_model(spec)
    return ModelSource(resolved.name, "gguf", resolved.path, resolved.sha256, record=carried_record(resolved.path))


def export_record_path(model_file: Path) -> Path:
    """Where the training record of a converted model file lives: beside it, its name + ``.winnow-model.json``."""
    return model_file.with_name(model_file.name + EXPORT_RECORD_SUFFIX)


def carried_record(path: Path) -> dict[str, Any] | None:
    """The training record a model carries across the process boundary (a GGUF loaded elsewhere, a
    folder a server serves): a folder's ``winnow-model.json`` (or its ``model/``'s), a file's sidecar
    (:func:`export_record_path`), else a GGUF's ``winnow.framing`` metadata key; None for a model
    Winnow did not train (or a path this machine cannot read)."""
    if path.is_dir():
        return _read_record(path / TRAINED_MODEL_DIR if (path / TRAINED_MODEL_DIR / MODEL_RECORD).is_file() else path)
    if not path.is_file():
        return None
    sidecar = export_record_path(path)
    if sidecar.is_file():
        return _read_json(sidecar)
    framing = gguf_framing(path) if path.suffix == ".gguf" else None
    return {"framing": framing, "source": f"{path}: GGUF metadata {GGUF_FRAMING_KEY}"} if framing else None


def gguf_framing(path: Path) -> str | None:
    """The GGUF's ``winnow.framing`` metadata value, or None (no such key, or not a GGUF this reader
    follows: llama.cpp, which loads the weights, judges the file itself)."""
    return gguf_string(path, GGUF_FRAMING_KEY)


def write_export_record(trained: Path, model_file: Path) -> Path:
    """Write ``trained``'s training record (a ``winnow train sft`` output or its ``model/``) beside
    ``model_file``, the GGUF (or other single file) it was converted to, so that evaluating it checks
    the framing it learnt (:func:`check_trained_framing`). Returns the sidecar's path."""
    folder = trained / TRAINED_MODEL_DIR if (trained / TRAINED_MODEL_DIR / MODEL_RECORD).is_file() else trained
    record = _read_record(folder)
    if record is None:
        raise ModelError(f"{trained} has no {MODEL_RECORD}: it is not a `winnow train sft` output",
                         "give the training output folder (--out of `winnow train sft`)")
    if not model_file.is_file():
        raise ModelError(f"{model_file}: no such file", "convert the model first (llama.cpp's convert_hf_to_gguf.py "
                                                        f"{folder}), then export its record beside the file")
    target = export_record_path(model_file)
    write_json(target, {**record, "exported_from": str(folder.resolve()), "file": model_file.name})
    return target


def trained_framing(source: ModelSource | None) -> str | None:
    """The framing a ``winnow train sft`` model learnt its prompts in (its ``winnow-model.json``; a
    record written before the setting existed: ``chat``, the only framing training had), or None for
    a model Winnow did not train."""
    if source is None or source.record is None:
        return None
    return str(source.record.get("framing", "chat"))


def check_trained_framing(method: str, framing: str, framings: Sequence[str],
                          sources: Mapping[str, ModelSource | None]) -> list[str]:
    """Refuse a run whose prompts are framed otherwise than its fine-tuned models learnt them.

    ``sources`` maps an agent role to its model. A model tuned in one framing and scored in another
    answers a format it never saw (RankRAG: trained on App. C's plain text, evaluated in App. D's),
    so where the method has the trained framing the run is refused, naming the flag that fixes it.
    A method whose prompts exist in one framing only (chat turns: MAIN-RAG, RRR) cannot follow the
    model; that is returned as a notice instead, since refusing would leave the model unusable there.
    """
    from ..settings import SettingError

    notices = []
    for role, source in sources.items():
        trained = trained_framing(source)
        if trained is None or trained == framing or source is None:
            continue
        whose = f"model {source.name}" + ("" if role == "default" else f" (role {role})")
        if trained in framings:
            raise SettingError("framing", f"{whose} was trained in the {trained} framing (its {MODEL_RECORD}), but "
                                          f"method {method} would prompt it in the {framing} framing, a format it "
                                          "never saw",
                               f"pass --framing {trained} (setting framing = \"{trained}\"), or use a model trained "
                               f"with `winnow train sft --framing {framing}`")
        notices.append(f"{whose} was trained in the {trained} framing, but method {method}'s prompts are "
                       f"{framing} only: it answers in a format it never saw")
    return notices


def _read_record(folder: Path) -> dict[str, Any] | None:
    record = folder / MODEL_RECORD
    return _read_json(record) if record.is_file() else None


def _read_json(record: Path) -> dict[str, Any]:
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ModelError(f"{record} is not valid JSON: {exc}", "the training output is damaged; train again") from exc
    if not isinstance(data, dict):
        raise ModelError(f"{record} is not a training record (a JSON object)", "write it again with `winnow train "
                                                                                 "export`, or remove it")
    return data


def _adapter_base(folder: Path) -> str:
    config = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
    base: str | None = config.get("base_model_name_or_path")
    if not base:
        raise ModelError(f"{folder}/adapter_config.json names no base model", "set base_model_name_or_path")
    return base


def _display_name(folder: Path, record: dict[str, Any] | None) -> str:
    # A training output is known by its run folder's name (…/my-run/model -> my-run).
    return folder.parent.name if record and folder.name == TRAINED_MODEL_DIR else folder.name


def folder_sha256(folder: Path) -> str:
    """One sha256 over the names and bytes of a model folder's files (weights, config, tokenizer)."""
    from . import files

    digest = hashlib.sha256()
    for path in sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES)):
        record = files.checksum_record(path)
        sha = files.remembered_sha256(path, record)
        if sha is None:  # weights are large: hash once, remember by (path, size, mtime)
            sha = files.hash_files([path], label=f"hashing {path.name}", total=path.stat().st_size, progress=False)
            files.remember(path, record, sha)
        digest.update(f"{path.name}\0{sha}\n".encode())
    return digest.hexdigest()


# --- loading (torch from here on) ---------------------------------------------------------------

def quiet_libraries() -> None:
    """Silence transformers' and datasets' progress bars and advice, which would interleave with
    Winnow's own progress; errors still surface as exceptions."""
    import warnings

    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    try:
        import datasets  # comes with trl; inference does not need it

        datasets.disable_progress_bars()
    except ImportError:
        pass
    warnings.filterwarnings("ignore", message=".*is deprecated and will be removed in v6.*", category=FutureWarning)


def torch_dtype(name: str) -> Any:
    import torch

    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if name not in dtypes:
        raise WinnowError(f"unknown dtype {name!r}", f"choose one of: {', '.join(dtypes)}")
    return dtypes[name]


def load_model(source: ModelSource, *, dtype: str = "float32", merge_adapter: bool = True) -> tuple[Any, Any]:
    """(model, tokenizer) for ``source``. An adapter is loaded on its base and, with
    ``merge_adapter``, merged into it (same outputs, no adapter overhead per token)."""
    require("train", "loading a model with transformers")
    quiet_libraries()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        if source.kind == "adapter":
            from peft import PeftModel

            assert source.base is not None  # locate_model gives every adapter its base
            base_model, tokenizer = load_model(source.base, dtype=dtype)
            if (source.path / "tokenizer_config.json").is_file():
                tokenizer = AutoTokenizer.from_pretrained(source.path)
            adapted = PeftModel.from_pretrained(base_model, source.path)
            model = adapted.merge_and_unload() if merge_adapter else adapted
        else:
            folder = dequantised_folder(source) if source.kind == "gguf" else source.path
            tokenizer = AutoTokenizer.from_pretrained(folder)
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype(dtype))
    except (OSError, ValueError, KeyError) as exc:
        raise ModelError(f"transformers could not load {source.name} ({source.path}): {exc}",
                         "is it a complete model folder, or a GGUF architecture transformers supports?") from exc
    if tokenizer.pad_token is None:  # batching needs one; it is always masked out
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def dequantised_folder(source: ModelSource) -> Path:
    """A Hugging Face folder holding the GGUF's weights dequantised to float32, made once per sha256."""
    target = cache_root() / "transformers" / f"{source.name}-{source.sha256[:16]}"
    if (target / "config.json").is_file():
        return target
    with output_lock(target, wait=True):
        if (target / "config.json").is_file():  # another process made it while we waited
            return target
        from transformers import AutoModelForCausalLM, AutoTokenizer

        folder, name = source.path.parent, source.path.name
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch_dtype("float32"))
        # The weights are plain float32 tensors now; the GGUF marker only stops save_pretrained.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        with staged_folder(target) as temp:
            model.save_pretrained(temp)
            tokenizer.save_pretrained(temp)
            (temp / "source.json").write_text(json.dumps({"gguf": str(source.path), "sha256": source.sha256}) + "\n",
                                              encoding="utf-8")
    return target
