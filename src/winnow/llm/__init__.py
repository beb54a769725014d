"""LLM backends (llama.cpp in-process, any OpenAI-compatible server), the call cache and the meter."""

from __future__ import annotations

from pathlib import Path

from ..errors import WinnowError
from ..extras import require
from ..paths import llm_cache_path
from .base import ChoiceScores, Generation, LLMBackend, Messages
from .cache import CallCache, CallStore
from .client import LLM, ProgressHook

BACKENDS = ("llama.cpp", "openai", "transformers")


def check_backend_options(backend: str, *, max_inflight: int | None, timeout: float | None, hedge: float | None,
                          tokenizer: str, slots: int | None) -> None:
    """Refuse an option of one backend given to another, naming it and what to do instead."""
    if max_inflight is not None and backend != "openai":
        raise WinnowError(f"max_inflight applies to the openai backend, not {backend!r}",
                          "the in-process backends run their own calls; leave --max-inflight out"
                          + (" (llama.cpp runs --slots sequences at once)" if backend == "llama.cpp" else ""))
    if timeout is not None and backend != "openai":
        raise WinnowError(f"timeout applies to the openai backend, not {backend!r}",
                          "the in-process backends have no requests to time out; leave --timeout out")
    if hedge is not None and backend != "openai":
        raise WinnowError(f"hedge applies to the openai backend, not {backend!r}",
                          "the in-process backends have no requests to send twice; leave --hedge out")
    if tokenizer and backend != "openai":
        raise WinnowError(f"tokenizer applies to the openai backend, not {backend!r}",
                          "the in-process backends count with the model's own tokenizer; leave --tokenizer out")
    if slots is not None and backend != "llama.cpp":
        raise WinnowError(f"slots applies to the in-process llama.cpp backend, not {backend!r}",
                          "a server's parallel slots are set on the server (llama-server --parallel N); "
                          "leave --slots out" + (" and use --max-inflight" if backend == "openai" else ""))


def load_llm(model: str = "smollm2-135m", *, backend: str = "llama.cpp", base_url: str | list[str] = "",
             api_key: str = "", cache: bool | str | Path = True, context_size: int | None = None,
             threads: int | None = None, progress: ProgressHook | None = None,
             max_inflight: int | None = None, slots: int | None = None, timeout: float | None = None,
             tokenizer: str = "", hedge: float | None = None) -> LLM:
    """An :class:`LLM` ready for stages.

    ``backend="llama.cpp"`` runs ``model`` (a registry name, a ``.gguf`` path or a hub id) in this
    process; ``backend="openai"`` sends requests for ``model`` to an OpenAI-compatible server at
    ``base_url``; ``backend="transformers"`` runs ``model`` (a `winnow train sft` output folder, a
    LoRA adapter or Hugging Face model folder, or a GGUF model dequantised) with Hugging Face
    transformers, which needs the ``[train]`` extra. ``cache`` is True for the default call cache, a
    path for another, False for none.

    ``context_size`` is the tokens of prompt and answer the model's context holds, exposed as
    ``llm.context_size``: llama.cpp allocates it (default 4,096); an OpenAI-compatible server's own
    report wins when it gives one and this is larger (:mod:`winnow.llm.context_size`); for
    transformers it defaults to the model's ``max_position_embeddings``.

    For ``backend="openai"``, ``base_url`` may name several endpoints (a list, or comma-separated);
    ``max_inflight`` bounds the requests in flight over all of them (default 64,
    :mod:`winnow.llm.dispatch`). The in-process backends refuse it.

    ``timeout`` (openai only) is the seconds one attempt of a call may take before it is abandoned
    and retried (on another endpoint when there is one); default 600, long enough for a long answer on
    a busy server. Lower it for a cluster whose calls take seconds, so a hung server costs little.

    ``hedge`` (openai only) is the seconds after which a call with no answer is sent again to another
    endpoint when a slot is free, the first answer winning (:mod:`winnow.llm.dispatch`); off by default.

    ``tokenizer`` (openai only) names the served model's tokenizer, to count tokens here instead of
    asking the server's ``/tokenize`` per count (:mod:`winnow.llm.hf_tokens`).

    ``slots`` (llama.cpp only, default 1) is how many sequences llama.cpp decodes together, each with
    ``context_size`` tokens of context (:mod:`winnow.llm.llamacpp`); a server's own slots are set on
    the server, so the other backends refuse it.
    """
    check_backend_options(backend, max_inflight=max_inflight, timeout=timeout, hedge=hedge, tokenizer=tokenizer,
                          slots=slots)
    if backend == "llama.cpp":
        from ..models import resolve_model
        from .llamacpp import LLAMACPP_ALTERNATIVE, LLAMACPP_FEATURE, LlamaCppBackend, checked_slots

        slots = checked_slots(1 if slots is None else slots)  # before loading anything
        require("llamacpp", LLAMACPP_FEATURE, alternative=LLAMACPP_ALTERNATIVE)  # before assembling the model
        resolved = resolve_model(model)
        engine: LLMBackend = LlamaCppBackend(resolved.path, model_name=resolved.name,
                                             model_sha256=resolved.sha256, context_size=context_size,
                                             threads=threads, slots=slots)
    elif backend == "openai":
        from .dispatch import DEFAULT_TIMEOUT_SECONDS
        from .openai_http import MAX_INFLIGHT, OpenAICompatibleBackend

        engine = OpenAICompatibleBackend(model, base_url=base_url, api_key=api_key, context_size=context_size,
                                         max_inflight=max_inflight or MAX_INFLIGHT,
                                         timeout=DEFAULT_TIMEOUT_SECONDS if timeout is None else timeout,
                                         tokenizer=tokenizer, hedge=hedge)
    elif backend == "transformers":
        from .transformers_backend import TransformersBackend

        engine = TransformersBackend(model, threads=threads, context_size=context_size)
    else:
        raise WinnowError(f"unknown backend {backend!r}", f"choose one of: {', '.join(BACKENDS)}")
    call_cache: CallStore | None = None
    if cache:
        # A store URL (redis://…: shared by replicas) or a SQLite file.
        call_cache = open_call_store(llm_cache_path() if cache is True else cache if isinstance(cache, str)
                                     else Path(cache))
    return LLM(engine, call_cache, progress=progress)



def open_call_store(cache: str | Path) -> CallStore:
    """The call cache ``cache`` names: a store URL (``redis://…``, :mod:`winnow.shared_store`: the
    entries in Redis, :mod:`.redis_cache`) or a SQLite file (:class:`CallCache`)."""
    from ..shared_store import is_store_url

    if isinstance(cache, str) and is_store_url(cache):
        from .redis_cache import RedisCallCache

        return RedisCallCache(cache)
    return CallCache(cache)


__all__ = ["BACKENDS", "CallCache", "CallStore", "ChoiceScores", "Generation", "LLM", "LLMBackend", "Messages",
           "check_backend_options", "load_llm", "open_call_store"]
