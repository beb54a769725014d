"""The optional parts of Winnow (pip extras), and the one error a missing part raises.

``pip install winnow-rag`` is the core: BM25 indexes and search, every method and reranker against an
OpenAI-compatible server, the command line and the Python API. Everything heavier is an extra, listed
in ``pyproject.toml`` and here by the modules it provides. Code that needs an extra imports it
through :func:`import_extra` (where it is used) or checks it with :func:`require` (at the command or
constructor that needs it, before any work), so a missing package becomes one line naming the extra
and the command that installs it, never a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType
from typing import Sequence

from .errors import WinnowError

#: Extra → the top-level modules its packages provide (pyproject.toml pins the packages).
EXTRAS: dict[str, tuple[str, ...]] = {
    "llamacpp": ("xllamacpp",),
    "serve": ("fastapi", "uvicorn", "prometheus_client"),
    "mcp": ("mcp",),
    "eval": ("ir_measures", "pytrec_eval", "matplotlib", "rouge_score"),
    "dense": ("onnxruntime", "tokenizers", "faiss", "huggingface_hub"),
    # hf:owner/repo/file.gguf model ids (dense includes it too, for the hub encoder presets).
    "hub": ("huggingface_hub",),
    "data": ("ir_datasets",),
    "parquet": ("pyarrow",),
    "ray": ("ray",),
    # winnow.integrations: the adapters subclass each framework's own base classes.
    "langchain": ("langchain_core", "langchain_classic"),
    "llamaindex": ("llama_index",),
    "haystack": ("haystack",),
    # Cross-encoder and monoT5 rerankers (winnow.models.rerankers): torch and transformers alone.
    "rerankers": ("torch", "transformers"),
    # --tokenizer: a served model's tokenizer run here (transformers without torch; gguf for a GGUF's).
    "tokenizer": ("transformers", "jinja2", "gguf"),
    # `winnow tune`: Optuna's samplers and study storage (SQLite by default, any database URL).
    "tune": ("optuna",),
    # `winnow serve --store redis://…`: the call cache and traces shared by replicas (winnow.shared_store).
    "redis": ("redis",),
    # `--retriever lucene`, `winnow index --bm25-engine lucene`: Anserini's Lucene in process through pyjnius
    # (winnow.index.lucene_jvm); the jar comes from pyserini==0.21.0, installed with --no-deps.
    "lucene": ("jnius",),
    "train": ("torch", "transformers", "trl", "peft", "accelerate", "gguf", "matplotlib"),
}


class MissingExtra(WinnowError):
    """A feature whose extra is not installed (or is installed but cannot be imported)."""

    def __init__(self, feature: str, extra: str, reason: str, alternative: str = "") -> None:
        command = f"pip install 'winnow-rag[{extra}]'"
        super().__init__(f"{feature} needs the '{extra}' extra: {command}" + (f", or {alternative}" if alternative
                                                                               else ""), reason)
        self.extra = extra


def require(extra: str, feature: str, *, alternative: str = "") -> None:
    """Fail fast, before any work, when a module of ``extra`` is missing. ``feature`` names what
    needs it as the user asked for it (``"winnow serve"``); ``alternative`` is another way to go."""
    missing = [module for module in EXTRAS[extra] if importlib.util.find_spec(module) is None]
    if missing:
        raise MissingExtra(feature, extra, f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not "
                                           f"installed", alternative)


def require_one_of(extras: Sequence[str], feature: str) -> None:
    """Fail fast unless at least one of ``extras`` is installed: for a feature that any of them
    provides (the service engine, behind both `winnow serve` and `winnow mcp`)."""
    if any(all(importlib.util.find_spec(module) for module in EXTRAS[extra]) for extra in extras):
        return
    first, *others = extras
    require(first, feature, alternative=" or ".join(f"pip install 'winnow-rag[{extra}]'" for extra in others))


def import_extra(module: str, extra: str, feature: str, *, alternative: str = "") -> ModuleType:
    """``import module`` (a module of ``extra``), or a :class:`MissingExtra` naming the extra."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        # Only a module of the extra itself is "not installed"; anything else is a broken install
        # (a missing shared library, a version clash), whose own message is the useful part.
        absent = isinstance(error, ModuleNotFoundError) and error.name in EXTRAS[extra]
        reason = f"{error.name} is not installed" if absent else f"{module} cannot be imported: {error}"
        raise MissingExtra(feature, extra, reason, alternative) from error
