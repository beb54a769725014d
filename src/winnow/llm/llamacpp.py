"""The embedded default backend: a GGUF model run in-process by llama.cpp through xllamacpp.

xllamacpp wraps llama.cpp's own server: a chat prompt goes to its chat completions, with the chat
template from the GGUF file (the model's own); a plain prompt (the ``plain`` framing: RankRAG's
Appendix D text "System: … User: … Assistant:") goes to its completions as it is, no template
applied. Every prompt is computed from scratch (see
``cache_prompt`` below), so a prompt's scores never depend on the prompt asked before it.
The context holds ``context_size`` tokens (default 4,096) of prompt and answer; tokens are counted
with llama.cpp's own tokenizer.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Sequence

from ..errors import ModelError
from ..extras import import_extra
from .base import ChoiceScores, Generation
from .context_size import DEFAULT_CONTEXT_SIZE, checked_context_size
from .messages import Prompt
from .openai_format import (
    CHAT_ROUTE,
    choice_request,
    generation_request,
    read_choice_scores,
    read_generation,
    route,
)
from .server_tokens import LlamaServerTokenIds, llama_server_context
from .tokens import ModelTokens, TokenCounter

#: How many next-token alternatives to read; llama.cpp sorts the full vocabulary anyway, so a
#: generous number costs nothing and makes a missing choice practically impossible.
TOP_LOGPROBS = 100
LLAMACPP_FEATURE = "the llama.cpp backend (the default --backend)"
LLAMACPP_ALTERNATIVE = "use --backend openai --base-url URL with your own server"


class LlamaCppBackend:
    """Runs one GGUF model in this process. Not thread-safe: one caller at a time."""

    batch_size = 1  # llama.cpp here decodes one sequence at a time; smaller batches mean finer progress

    def __init__(self, model_path: str | Path, *, model_name: str = "", model_sha256: str = "",
                 context_size: int | None = None, threads: int | None = None) -> None:
        import httpx

        xllamacpp = import_extra("xllamacpp", "llamacpp", LLAMACPP_FEATURE, alternative=LLAMACPP_ALTERNATIVE)

        path = Path(model_path)
        if not path.is_file():
            raise ModelError(f"model file not found: {path}", "run `winnow models` to see installed models")
        params = xllamacpp.CommonParams()
        params.model.path = str(path)
        requested = checked_context_size(context_size) or DEFAULT_CONTEXT_SIZE
        params.n_ctx = requested
        threads = threads or max(1, os.cpu_count() or 1)
        params.cpuparams.n_threads = threads
        params.cpuparams_batch.n_threads = threads
        params.n_parallel = 1
        # Each prompt is computed from scratch. Reusing the KV cache of the previous prompt's common
        # prefix changes how the rest is split into batches, and so the floating-point sums: the
        # same prompt then scores differently depending on what was asked before it (P("True")
        # -0.680 or -0.721 for one passage), which breaks the call cache's soundness and makes a
        # batch of questions answer differently from the same questions one at a time.
        params.cache_prompt = False
        # llama.cpp also keeps whole past prompts in RAM (8 GiB by default). Exact repeats are
        # already answered by Winnow's call cache, so this would only cost memory and make timings
        # depend on history.
        params.cache_ram_mib = 0
        params.verbosity = -1  # llama.cpp is chatty on stderr; users want answers, not logs
        self._path = path
        self._name = model_name or path.stem
        self._sha256 = model_sha256
        try:
            self._server = xllamacpp.Server(params)
        except Exception as exc:  # xllamacpp raises plain RuntimeError/ValueError on a bad file
            raise ModelError(f"llama.cpp could not load {path}: {exc}",
                             "is it a valid GGUF file? `winnow models` verifies the registry models") from exc
        # xllamacpp serves llama.cpp's HTTP routes on loopback; its tokenizer and chat template are
        # reached there (the Python object offers chat completions but no /tokenize).
        address = self._server.listening_address
        self._http = httpx.Client(timeout=600.0)
        source = f"llama.cpp ({self._name})"
        reported = llama_server_context(self._http, address)
        self.tokens: TokenCounter = ModelTokens(LlamaServerTokenIds(self._http, address, source),
                                                "exact: llama.cpp's tokenizer")
        #: The context per sequence llama.cpp really allocated (it reports it in /props).
        self.context_size = (reported and reported[0]) or requested
        self.context_size_source = f"llama.cpp in-process, started with context_size={requested}"
        if self.context_size != requested:
            # llama.cpp rounds the context up (to 256 at least); say so rather than pretend.
            self.context_size_source += f" (llama.cpp allocated {self.context_size})"

    @property
    def identity(self) -> dict[str, Any]:
        return {"backend": "llama.cpp", "model": self._name, "sha256": self._sha256 or str(self._path)}

    @property
    def http_address(self) -> str:
        """The OpenAI-compatible HTTP endpoint llama.cpp serves for this model (loopback)."""
        return self._server.listening_address

    def _call(self, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        started = time.perf_counter()
        handle = self._server.handle_chat_completions if route(body) == CHAT_ROUTE else self._server.handle_completions
        response = handle({**body, "cache_prompt": False})
        return response, time.perf_counter() - started

    def generate(self, prompts: Sequence[Prompt], *, max_tokens: int, temperature: float = 0.0,
                 stop: Sequence[str] = ()) -> list[Generation]:
        results = []
        for prompt in prompts:
            response, seconds = self._call(generation_request(prompt, max_tokens=max_tokens,
                                                              temperature=temperature, stop=stop))
            results.append(read_generation(response, seconds, f"llama.cpp ({self._name})", max_tokens=max_tokens))
        return results

    def choice_logprobs(self, prompts: Sequence[Prompt], choices: Sequence[str]) -> list[ChoiceScores]:
        results = []
        for prompt in prompts:
            response, seconds = self._call(choice_request(prompt, top_logprobs=TOP_LOGPROBS))
            results.append(read_choice_scores(response, choices, seconds, f"llama.cpp ({self._name})"))
        return results

    def close(self) -> None:
        self._http.close()
        self._server = None
