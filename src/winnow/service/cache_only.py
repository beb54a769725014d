"""Answering from the LLM call cache alone, without waiting for the worker queue.

A cache-only twin of each loaded LLM has the same identity (so the same cache keys) and the same
call cache (file or shared store, its own connection), but a backend that refuses to compute: any
prompt not in the cache raises :class:`CacheMiss`. A request is first run against the twins on a
request thread; if every call it makes is a hit it is answered at once, in parallel with whatever
the worker is computing, and only on a miss does it join the queue for the real model. Cache hits
are pure functions of their key (temperature 0), so both paths give the same answer.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..llm.base import ChoiceScores, Generation
from ..llm.client import LLM
from ..llm.messages import Prompt
from ..llm.tokens import TokenCounter


class CacheMiss(Exception):
    """A call that is not in the cache: the request needs the real model."""


class CacheOnlyBackend:
    """Looks like the real backend to the cache; never computes anything. It counts tokens and
    knows the context as the real one does, so prompts fitted to the context match its keys."""

    batch_size = 1

    def __init__(self, identity: dict[str, Any], real: LLM) -> None:
        self._identity = dict(identity)
        self._real = real

    @property
    def context_size(self) -> int:
        return self._real.context_size

    @property
    def context_size_source(self) -> str:
        return self._real.context_size_source

    @property
    def tokens(self) -> TokenCounter:
        return self._real.token_counter

    @property
    def identity(self) -> dict[str, Any]:
        return self._identity

    def generate(self, prompts: Sequence[Prompt], **_: Any) -> list[Generation]:
        raise CacheMiss(f"{len(prompts)} generation(s) not cached")

    def choice_logprobs(self, prompts: Sequence[Prompt], choices: Sequence[str]) -> list[ChoiceScores]:
        raise CacheMiss(f"{len(prompts)} choice scoring(s) not cached")

    def close(self) -> None:
        pass


def cache_only(llm: LLM) -> LLM | None:
    """The cache-only twin of ``llm`` (its own connection to the same cache file), or None when
    ``llm`` has no cache."""
    if llm.cache is None:
        return None
    return LLM(CacheOnlyBackend(llm.identity, llm), llm.cache.reopen())
