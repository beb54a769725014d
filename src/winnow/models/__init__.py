"""The model registry: model names, local paths and hub ids turned into verified GGUF files.

:func:`resolve_model` accepts

* a registry name (``winnow models`` lists them). The GGUF arrives inside pip packages, either as
  one file used in place or split into parts that are joined once into :func:`model_cache_dir`;
* a local ``.gguf`` path;
* a hub id ``hf:owner/repo/file.gguf``, downloaded once (online users only).

A file's sha256 is computed once and remembered with its size and mtime_ns, so later runs do not
re-read a GB file. The split packages were uploaded by an unknown party, so a joined file is used
only after its sha256 matches the registry's, and a join writes to a temporary name first: a killed
join never leaves a file that looks complete.
"""

from __future__ import annotations

from .files import model_cache_dir
from .registry import REGISTRY, ModelPart, ModelSpec, split_parts
from .resolve import HUB_PREFIX, ModelStatus, ResolvedModel, format_models_table, list_models, resolve_model

__all__ = ["HUB_PREFIX", "REGISTRY", "ModelPart", "ModelSpec", "ModelStatus", "ResolvedModel",
           "format_models_table", "list_models", "model_cache_dir", "resolve_model", "split_parts"]
