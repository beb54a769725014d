"""The embedded default backend: a GGUF model run in-process by llama.cpp through xllamacpp.

xllamacpp wraps llama.cpp's own server: a chat prompt goes to its chat completions, with the chat
template from the GGUF file (the model's own); a plain prompt (the ``plain`` framing: RankRAG's
Appendix D text "System: … User: … Assistant:") goes to its completions as it is, no template
applied. Every prompt is computed from scratch (see
``cache_prompt`` below), so a prompt's scores never depend on the prompt asked before it.
The context holds ``context_size`` tokens (default 4,096) of prompt and answer; tokens are counted
with llama.cpp's own tokenizer.

With ``slots`` > 1, llama.cpp holds that many sequences at once (its server's parallel slots, each
with a context of ``context_size`` tokens of its own) and decodes them together in one batch per
step; a stage's prompts are handed to it from as many threads (xllamacpp releases the GIL while
llama.cpp answers, and its server queues each call to a free slot exactly as it does for concurrent
HTTP requests). That changes scores: llama.cpp's CPU kernels sum in a different order when a batch
holds several sequences' tokens, so a P("True") moves by up to about 0.04 in log-probability (greedy
answers mostly stay the same) and depends on which calls happened to share a batch, which differs
from run to run. One slot, the default, keeps every prompt's scores a function of the prompt alone.
What slots gain in speed is measured by ``bench/bench_slots.py`` (``docs/benchmarks.md``).
"""

from __future__ import annotations

import functools
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

from ..cores import available_cores
from ..errors import ModelError, WinnowError
from ..extras import import_extra
from ..models.loading import ModelSource, carried_record
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

T = TypeVar("T")
M = TypeVar("M")


def checked_slots(slots: object) -> int:
    """``slots`` if it is a usable number of parallel sequences, else a WinnowError naming the option."""
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
        raise WinnowError(f"slots must be a whole number of sequences, at least 1 (got {slots!r})",
                          "e.g. --slots 4; 1 runs one sequence at a time")
    return slots


class LlamaCppBackend:
    """Runs one GGUF model in this process, ``slots`` sequences at a time (see the module's note).
    A stage's calls may come from one thread at a time; the backend runs them on its own threads."""

    def __init__(self, model_path: str | Path, *, model_name: str = "", model_sha256: str = "",
                 context_size: int | None = None, threads: int | None = None, slots: int = 1) -> None:
        import httpx

        xllamacpp = import_extra("xllamacpp", "llamacpp", LLAMACPP_FEATURE, alternative=LLAMACPP_ALTERNATIVE)

        path = Path(model_path)
        if not path.is_file():
            raise ModelError(f"model file not found: {path}", "run `winnow models` to see installed models")
        params = xllamacpp.CommonParams()
        params.model.path = str(path)
        requested = checked_context_size(context_size) or DEFAULT_CONTEXT_SIZE
        self.slots = checked_slots(slots)
        # llama.cpp splits n_ctx evenly between its slots: allocate context_size for each, so that
        # context_size keeps meaning the tokens one sequence can hold. Each slot has a cache of its
        # own (not one shared, "unified", cache), so no sequence can crowd out another.
        params.n_ctx = requested * self.slots
        params.n_parallel = self.slots
        params.kv_unified = False
        threads = threads or available_cores()
        params.cpuparams.n_threads = threads
        params.cpuparams_batch.n_threads = threads
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
        #: The model with the training record it carries (a converted `winnow train sft` model's sidecar
        #: or GGUF key), which a method checks its framing against.
        self.source = ModelSource(self._name, "gguf", path, model_sha256, record=carried_record(path))
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
        #: The context per sequence llama.cpp really allocated (it reports it per slot in /props).
        self.context_size = (reported and reported[0]) or requested
        self.context_size_source = f"llama.cpp in-process, started with context_size={requested}"
        if self.slots > 1:
            self.context_size_source += f" for each of {self.slots} slots"
        if self.context_size != requested:
            # llama.cpp rounds the context up (to 256 at least); say so rather than pretend.
            self.context_size_source += f" (llama.cpp allocated {self.context_size})"
        self._lock = threading.Lock()
        self.inflight = 0  # sequences in llama.cpp's slots right now (for a progress bar)
        self.tokens_done = 0  # prompt + completion tokens of the calls answered so far
        # The workers are the slots: one that finishes takes the next prompt at once.
        self._pool = (ThreadPoolExecutor(self.slots, thread_name_prefix="winnow-llamacpp")
                      if self.slots > 1 else None)

    @property
    def identity(self) -> dict[str, Any]:
        identity: dict[str, Any] = {"backend": "llama.cpp", "model": self._name,
                                    "sha256": self._sha256 or str(self._path)}
        if self.slots > 1:
            # Sequences decoded together score slightly differently from one at a time (and from run
            # to run, as batches form): their answers are not interchangeable with one slot's, so
            # neither the call cache nor a run folder may mix them.
            identity["slots"] = self.slots
        return identity

    @property
    def http_address(self) -> str:
        """The OpenAI-compatible HTTP endpoint llama.cpp serves for this model (loopback)."""
        address: str = self._server.listening_address
        return address

    def _call(self, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        with self._lock:
            self.inflight += 1
        started = time.perf_counter()
        handle = self._server.handle_chat_completions if route(body) == CHAT_ROUTE else self._server.handle_completions
        try:
            response = handle({**body, "cache_prompt": False})
        finally:
            with self._lock:
                self.inflight -= 1
        return response, time.perf_counter() - started

    def _answered(self, tokens: int) -> None:
        with self._lock:
            self.tokens_done += tokens

    def _map(self, prompts: Sequence[M], one: Callable[[M], T], on_done: Callable[[int], None] | None) -> list[T]:
        """``one(prompt)`` for every prompt, in order: on the slots' workers when there are several."""
        if self._pool is None or len(prompts) <= 1:
            out: list[T] = []
            for prompt in prompts:
                out.append(one(prompt))
                if on_done:
                    on_done(len(out))
            return out
        return pooled_map(self._pool, [functools.partial(one, prompt) for prompt in prompts], on_done)

    def generate(self, prompts: Sequence[Prompt], *, max_tokens: int, temperature: float = 0.0,
                 stop: Sequence[str] = (), on_done: Callable[[int], None] | None = None) -> list[Generation]:
        def one(prompt: Prompt) -> Generation:
            response, seconds = self._call(generation_request(prompt, max_tokens=max_tokens,
                                                              temperature=temperature, stop=stop))
            generation = read_generation(response, seconds, f"llama.cpp ({self._name})", max_tokens=max_tokens)
            self._answered(generation.prompt_tokens + generation.completion_tokens)
            return generation

        return self._map(prompts, one, on_done)

    def choice_logprobs(self, prompts: Sequence[Prompt], choices: Sequence[str],
                        on_done: Callable[[int], None] | None = None) -> list[ChoiceScores]:
        def one(prompt: Prompt) -> ChoiceScores:
            response, seconds = self._call(choice_request(prompt, top_logprobs=TOP_LOGPROBS))
            scores = read_choice_scores(response, choices, seconds, f"llama.cpp ({self._name})")
            self._answered(scores.prompt_tokens + 1)  # one output token is generated
            return scores

        return self._map(prompts, one, on_done)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self._http.close()
        self._server = None


def pooled_map(pool: ThreadPoolExecutor, calls: Sequence[Callable[[], T]],
               on_done: Callable[[int], None] | None = None) -> list[T]:
    """Every call's result, in order, run on ``pool``'s workers (the slots): a worker that finishes
    takes the next call at once, so no call waits for a slower one started with it. ``on_done`` is
    told after each finished call how many have finished; the first failure cancels the calls not
    yet started."""
    futures = {pool.submit(call): i for i, call in enumerate(calls)}
    results: list[Any] = [None] * len(calls)
    try:
        for done, future in enumerate(as_completed(futures), 1):
            results[futures[future]] = future.result()
            if on_done:
                on_done(done)
    except BaseException:
        for future in futures:
            future.cancel()
        raise
    return results
