"""The training record of the model an OpenAI-compatible server serves: the framing check across the
process boundary.

A model tuned by ``winnow train sft`` learnt its prompts in one framing (RankRAG App. C: the plain
text; :func:`winnow.models.loading.check_trained_framing` refuses the other). Served by vLLM or a
llama.cpp server, it reaches Winnow as a name over HTTP; the record travels with the files instead
(the folder's ``winnow-model.json``, a GGUF's sidecar or metadata key:
:func:`winnow.models.loading.carried_record`). ``GET /v1/models`` says which model a server serves:
vLLM gives the folder it loaded as ``root``, a llama.cpp server the GGUF's path as ``id``. Where that
path (or ``--model`` itself) can be read on this machine, its record is checked like a local model's;
where the server does not say, or names a path this machine cannot read, the run goes on with one
note saying the framing was not checked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import BackendError
from ..models.loading import ModelSource, carried_record
from .http_json import HttpClient
from .server_tokens import json_or_none


def served_paths(models: Any, model: str) -> list[str]:
    """The paths a ``GET /v1/models`` answer gives for ``model`` (its ``root`` and ``id``; the only
    model's when none is called ``model``), then ``model`` itself, each once."""
    data = models.get("data") if isinstance(models, dict) else None
    entries = [e for e in data if isinstance(e, dict)] if isinstance(data, list) else []
    chosen = [e for e in entries if e.get("id") == model] or (entries if len(entries) == 1 else [])
    found = [str(e[key]) for e in chosen for key in ("root", "id") if isinstance(e.get(key), str) and e[key]]
    return list(dict.fromkeys([*found, model]))


def _local_looking(name: str) -> bool:
    # A hub id ("meta-llama/Llama-3-8B") also has a slash; a path the server read starts like one.
    return name.startswith(("/", "~", "./", "../")) or name.endswith(".gguf")


def served_source(client: HttpClient, base_url: str, model: str) -> tuple[ModelSource | None, str]:
    """(the served model with its training record, "") where one is found here; else (None, a note
    when the framing could not be checked: the server did not say what it serves, or named a path
    this machine cannot read), or (None, "") for a model no record is known of (a hosted model)."""
    try:
        answer = json_or_none(client, "GET", f"{base_url}/models")
    except BackendError:  # not up yet (`winnow serve` may start first): the first call will say so
        answer = None
    paths = served_paths(answer, model)
    for name in paths:
        path = Path(name).expanduser()
        record = carried_record(path) if path.exists() else None
        if record is not None:
            return ModelSource(model, "served", path, "", record=record), ""
    if answer is None:
        return None, (f"the server at {base_url} does not say which model it serves (GET /models), so the "
                      f"framing model {model} was trained in is not checked; if it is a `winnow train sft` model, "
                      "pass the framing it was trained in (its winnow-model.json)")
    unreadable = [name for name in paths if _local_looking(name) and not Path(name).expanduser().exists()]
    if unreadable:
        return None, (f"the server serves model {model} from {unreadable[0]}, which this machine cannot read, so "
                      "the framing it was trained in is not checked; run Winnow where that path is readable, or "
                      "pass the framing it was trained in (its winnow-model.json)")
    return None, ""
