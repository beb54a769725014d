"""The LLM as stages see it: a backend behind the call cache, recording every call in the trace."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any, Callable, Sequence, TypeVar

from ..records import LLMCall, StageTrace
from .base import ChoiceScores, Generation, LLMBackend
from .cache import CORRUPT, CacheDamaged, CallStore, cached_answer_is_usable, call_key
from .context_size import resolve_context_size
from .messages import Prompt, is_plain, recorded
from .tokens import EstimatedTokens, TokenCounter

T = TypeVar("T")
#: Choice calls a run has made before most of them lacking every choice is warned about.
UNSEEN_WARNING_MIN_CALLS = 5
ProgressHook = Callable[[str, int, int], None]  # (stage name, prompts done, prompts in the batch)


def _offers(backend: object, name: str) -> bool:
    """Whether ``backend`` has attribute ``name``, without evaluating a property to find out."""
    return name in getattr(backend, "__dict__", {}) or any(name in vars(k) for k in type(backend).__mro__)


def traces_per_prompt(stage: StageTrace | Sequence[StageTrace], count: int) -> list[StageTrace]:
    """One StageTrace per prompt: a stage over one question passes its trace, a stage over a batch
    passes each prompt's question's own trace, so every call is recorded where it belongs."""
    if isinstance(stage, StageTrace):
        return [stage] * count
    traces = list(stage)
    if len(traces) != count:
        raise ValueError(f"{len(traces)} stage traces for {count} prompts: give one per prompt")
    return traces


class LLM:
    """Wraps a backend: looks each prompt up in the cache, sends only the misses (as one batch),
    stores their answers, and records every call, hit or miss, in the calling stage's trace (or,
    for a stage over many questions, in the trace of the question each prompt belongs to)."""

    def __init__(self, backend: LLMBackend, cache: CallStore | None = None,
                 progress: ProgressHook | None = None) -> None:
        self.backend = backend
        self.cache = cache
        self.progress = progress  # the hook of every thread that has none of its own (reporting_to)
        self._local = threading.local()
        self.stale_cache_entries = 0  # cached answers today's checks refuse, asked again (see _usable_hit)
        #: Cached answers refused by their checksum, by why (cache.CORRUPT, cache.UNVERIFIED), asked again.
        self.rejected_cache_entries: dict[str, int] = {}
        #: Choice calls answered, and those with none of the choices among the top tokens (see _scored).
        self.choice_calls = self.choices_not_in_top = 0
        self._notes_said: set[str] = set()
        self._refused_keys: set[str] = set()  # keys whose cached answer was refused, until asked again
        self._lock = threading.Lock()
        # A backend written elsewhere may offer only the two verbs: it gets the default context and
        # the estimate, and the trace says so. (Checked without reading the attributes: an
        # OpenAI-compatible backend asks its server only when they are first used.)
        self._counts_tokens = _offers(backend, "tokens")
        self._knows_context = _offers(backend, "context_size")
        self._estimate = EstimatedTokens(
            f"estimated ({EstimatedTokens.RULE}): the backend has no tokenizer")
        self._default_context = resolve_context_size(None, None, "")
        # Said once on stderr (by the first of winnow eval's client processes for all of them).
        self.estimate_announced = False

    @contextmanager
    def reporting_to(self, hook: ProgressHook | None) -> Iterator[None]:
        """Calls made by this thread report to ``hook`` (instead of :attr:`progress`) until the block
        ends: `winnow serve` runs several requests at once on one LLM, each with its own hook."""
        previous = getattr(self._local, "hook", None)
        self._local.hook = hook
        try:
            yield
        finally:
            self._local.hook = previous

    def _progress_hook(self) -> ProgressHook | None:
        return getattr(self._local, "hook", None) or self.progress

    @property
    def progress_hook(self) -> ProgressHook | None:
        """The hook this thread's calls report to: a stage that hands its calls to threads of its own
        passes it on (:meth:`reporting_to`), so a `winnow serve` request's progress and cancellation
        follow them."""
        return self._progress_hook()

    def _send(self, stage: str, items: list[Prompt], run: Callable[..., list[T]]) -> list[T]:
        """Send ``items`` to the backend, reporting progress as calls finish.

        A backend that schedules calls itself (it counts its ``inflight`` calls: the OpenAI-compatible
        one's dispatcher, llama.cpp's slots) takes them all at once, keeps its own bound on calls in
        flight and reports each finished call; any other runs them in chunks of its preferred batch
        size, with progress between chunks so a long rerank shows it is moving.
        """
        progress = self._progress_hook()
        if _offers(self.backend, "inflight"):
            report = (lambda done: progress(stage, done, len(items))) if progress else None
            return run(items, on_done=report)
        size = max(1, getattr(self.backend, "batch_size", len(items) or 1))
        out: list[T] = []
        for start in range(0, len(items), size):
            out.extend(run(items[start:start + size]))
            if progress:
                progress(stage, len(out), len(items))
        return out

    @property
    def inflight(self) -> int:
        """Calls on the wire or in llama.cpp's slots right now (0 for a backend that does not count them)."""
        return int(getattr(self.backend, "inflight", 0))

    @property
    def tokens_done(self) -> int:
        """Tokens of the calls answered so far, as they finish (0 for a backend that does not count them)."""
        return int(getattr(self.backend, "tokens_done", 0))

    @property
    def identity(self) -> dict[str, Any]:
        return self.backend.identity

    @property
    def model_name(self) -> str:
        """The model's name as traces, cost tables and price tables (``--prices``) know it."""
        return str(self.identity.get("model", ""))

    # --- fitting prompts to the context (see winnow.stages.fitting) ----------------------------

    @property
    def context_size(self) -> int:
        """Tokens of prompt and answer the model's context holds."""
        return self.backend.context_size if self._knows_context else self._default_context[0]

    @property
    def context_size_source(self) -> str:
        """Where :attr:`context_size` came from (the option, the server's report, a default)."""
        return self.backend.context_size_source if self._knows_context else self._default_context[1]

    @property
    def token_counter(self) -> TokenCounter:
        """The backend's token counter (:mod:`winnow.llm.tokens`), or the estimate if it has none.
        Falling back to the estimate is said once on stderr: passages are then cut by a rule of thumb
        (shorter than the model needs), which a user should know before reading the results."""
        counter = self.backend.tokens if self._counts_tokens else self._estimate
        if not counter.exact and not self.estimate_announced:
            self.estimate_announced = True
            print(f"winnow: tokens for {self.model_name or 'the model'} are {counter.description}; passages "
                  "fitted to the context are cut by this estimate", file=sys.stderr)
        return counter

    @property
    def token_counting(self) -> str:
        """How tokens are counted, for the trace: "exact: …" or "estimated …"."""
        return self.token_counter.description

    @property
    def token_counts_exact(self) -> bool:
        return self.token_counter.exact

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` in the model's own tokenizer."""
        return self.token_counter.count(text)

    def truncate_tokens(self, text: str, max_tokens: int) -> tuple[str, bool]:
        """``text`` cut to at most ``max_tokens`` of the model's tokens, and whether it was cut."""
        return self.token_counter.truncate(text, max_tokens)

    def count_prompt_tokens(self, prompt: Prompt) -> int:
        """Tokens of a whole prompt as the backend sends it (a chat prompt with its chat template)."""
        return self.token_counter.count_prompt(prompt)

    def _lookup(self, kind: str, prompts: Sequence[Prompt], params: dict[str, Any], *, shared: bool = True
                ) -> tuple[list[str], list[dict[str, Any] | None], dict[str, int]]:
        """Each prompt's cache key and cache hit, and the misses to send: key -> first prompt with it.

        Identical calls of one batch (same kind, messages and parameters) are sent once and share
        the answer; the others are recorded as served without a request, like cache hits. Sampled
        calls (``shared=False``) are each sent: their answers are meant to differ. A plain prompt's
        key names its framing, so it never meets a chat prompt's answer (and chat keys stay as they
        were before plain prompts existed).
        """
        if self.cache is None and len(prompts) == 1:
            # Nothing to look up and nothing to share: hashing the prompt (0.1-0.2 ms of a 20-passage
            # listwise prompt) would only name it. One call a question is vanilla's and RankGPT's way.
            return [""], [None], {"": 0}
        keys = [call_key(self.identity, kind, prompt, {**params, "framing": "plain"} if is_plain(prompt) else params)
                for prompt in prompts]
        if not shared:
            keys = [f"{key}#{i}" for i, key in enumerate(keys)]
        hits = [self._usable_hit(kind, key) for key in keys]
        to_send: dict[str, int] = {}
        for i, (key, hit) in enumerate(zip(keys, hits, strict=True)):
            if hit is None:
                to_send.setdefault(key, i)
        return keys, hits, to_send

    @property
    def _live_cache(self) -> CallStore | None:
        """The call cache, unless it turned out damaged (then the run goes on without it)."""
        return None if self.cache is None or self.cache.damaged is not None else self.cache

    def _note(self, what: str, text: str) -> None:
        """Say ``text`` on stderr, once per LLM for each ``what``."""
        if what not in self._notes_said:
            self._notes_said.add(what)
            print(f"winnow: {text}", file=sys.stderr)

    def _cache_damaged(self, damage: CacheDamaged) -> None:
        self._note("damaged", f"{damage.message}: going on without the cache ({damage.hint})")

    def _usable_hit(self, kind: str, key: str) -> dict[str, Any] | None:
        """The cached answer under ``key``, or None when there is none or it is unusable.

        An entry that fails its checksum (or was written before entries had one) is never served: the
        cache deletes it, the call is asked again, and the call's trace and usage say so
        (``cache_rejected``). A cache written by an older Winnow may also hold an answer today's
        response checks refuse (a NaN log-probability, a missing field); serving it would put a
        silently wrong score in a result. Such an entry counts as a miss too: the call is asked again
        and the entry overwritten, and :attr:`stale_cache_entries` counts them.
        """
        cache = self._live_cache
        if cache is None:
            return None
        try:
            hit, refused = cache.lookup(key)
        except CacheDamaged as damage:
            self._cache_damaged(damage)
            return None
        if refused:
            self._rejected(key, refused, cache)
            return None
        if hit is None or cached_answer_is_usable(kind, hit):
            return hit
        self._rejected(key, "", cache)
        self.stale_cache_entries += 1
        return None

    def _rejected(self, key: str, why: str, cache: CallStore) -> None:
        with self._lock:
            self._refused_keys.add(key)
            if why:
                self.rejected_cache_entries[why] = self.rejected_cache_entries.get(why, 0) + 1
        if why == CORRUPT:
            self._note(why, f"the LLM call cache {cache.where} held an answer that fails its checksum (the file was "
                            "changed or damaged): it was dropped and asked again, never served; such calls count "
                            "as cache_rejected in usage")
        elif why:
            self._note(why, f"the LLM call cache {cache.where} holds answers written before they carried a checksum: "
                            "each is asked again once (it cannot be verified) and stored with one")

    def _refused(self, key: str) -> bool:
        """Whether ``key``'s cached answer was refused (this call is its recomputation): said once."""
        with self._lock:
            if key in self._refused_keys:
                self._refused_keys.discard(key)
                return True
        return False

    def _store(self, key: str, kind: str, answer: dict[str, Any]) -> None:
        cache = self._live_cache
        if cache is None:
            return
        try:
            cache.put(key, kind, answer)
        except CacheDamaged as damage:
            self._cache_damaged(damage)

    def generate(self, prompts: Sequence[Prompt], *, stage: StageTrace | Sequence[StageTrace], max_tokens: int,
                 temperature: float = 0.0, stop: Sequence[str] = ()) -> list[Generation]:
        traces = traces_per_prompt(stage, len(prompts))
        params = {"max_tokens": max_tokens, "temperature": temperature, "stop": list(stop)}
        keys, hits, to_send = self._lookup("generate", prompts, params, shared=temperature == 0.0)
        fresh = self._send(_name(traces), [prompts[i] for i in to_send.values()], lambda chunk, **hook:
                           self.backend.generate(chunk, max_tokens=max_tokens, temperature=temperature, stop=stop,
                                                 **hook))
        sent = dict(zip(to_send, fresh, strict=True))
        for key, generation in sent.items():
            # Sampled answers are not a function of the prompt: cache only greedy decoding.
            if temperature == 0.0:
                self._store(key, "generate", asdict(generation))
        results = [Generation(**hit) if hit else sent[keys[i]] for i, hit in enumerate(hits)]
        for i, generation in enumerate(results):
            paid = to_send.get(keys[i]) == i
            traces[i].record(LLMCall(traces[i].name, "generate", recorded(prompts[i]), generation.text,
                                     generation.prompt_tokens, generation.completion_tokens,
                                     generation.seconds, cached=not paid, finish_reason=generation.finish_reason,
                                     retries=generation.retries if paid else 0, model=self.model_name,
                                     cache_rejected=paid and self._refused(keys[i])))
        return results

    def choice_scores(self, prompts: Sequence[Prompt], choices: Sequence[str], *,
                      stage: StageTrace | Sequence[StageTrace]) -> list[ChoiceScores]:
        traces = traces_per_prompt(stage, len(prompts))
        params = {"choices": list(choices)}
        keys, hits, to_send = self._lookup("choices", prompts, params)
        fresh = self._send(_name(traces), [prompts[i] for i in to_send.values()],
                           lambda chunk, **hook: self.backend.choice_logprobs(chunk, choices, **hook))
        sent = dict(zip(to_send, fresh, strict=True))
        for key, scores in sent.items():
            self._store(key, "choices", asdict(scores))
        results = [ChoiceScores(**{**hit, "missing": tuple(hit["missing"])}) if hit else sent[keys[i]]
                   for i, hit in enumerate(hits)]
        for i, scores in enumerate(results):
            paid = to_send.get(keys[i]) == i
            traces[i].record(LLMCall(traces[i].name, "choices", recorded(prompts[i]),
                                     {c: round(scores.probability(c), 6) for c in choices},
                                     scores.prompt_tokens, 0, scores.seconds, cached=not paid,
                                     retries=scores.retries if paid else 0, model=self.model_name,
                                     cache_rejected=paid and self._refused(keys[i]),
                                     choices_not_in_top=len(scores.missing) == len(choices)))
        self._count_unseen(results, choices)
        return results

    def _count_unseen(self, results: Sequence[ChoiceScores], choices: Sequence[str]) -> None:
        """Count the answers with none of ``choices`` among the top tokens, and warn once when they are
        most of the run so far: each such passage got the uniform score, which says nothing of it."""
        unseen = sum(len(scores.missing) == len(choices) for scores in results)
        with self._lock:
            self.choice_calls += len(results)
            self.choices_not_in_top += unseen
            calls, missing = self.choice_calls, self.choices_not_in_top
        if calls >= UNSEEN_WARNING_MIN_CALLS and 2 * missing > calls:
            named = "/".join(f'"{c}"' for c in choices)
            self._note("unseen", f"{missing} of {calls} choice calls so far had none of {named} among "
                                 f"{self.model_name or 'the model'}'s top next tokens: such an answer gives every "
                                 "choice the same probability (a pointwise passage P(\"True\") 0.5, a judged one "
                                 "log-odds 0; RRR's graded stage reads the grade from generated text instead), which "
                                 "ranks nothing; does the server return top log-probabilities (top_logprobs) for this "
                                 "model, and does the model answer in that format? (counted as choices_not_in_top "
                                 "in usage)")

    def close(self) -> None:
        """Close the backend (a model, or an HTTP backend's sessions) and the call cache."""
        self.backend.close()
        if self.cache is not None:
            self.cache.close()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _name(traces: list[StageTrace]) -> str:
    return traces[0].name if traces else ""
