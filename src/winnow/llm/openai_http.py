"""Any OpenAI-compatible chat-completions server: vLLM, llama.cpp's server, TGI, hosted APIs.

Set the base URL (``.../v1``) and key by option or by ``WINNOW_OPENAI_BASE_URL`` /
``WINNOW_OPENAI_API_KEY`` (``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` are honoured too). Requests in a
batch are sent concurrently, since a server batches them far better than we can.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence, TypeVar

import httpx

from ..errors import BackendError
from .base import ChoiceScores, Generation, Messages
from .context_size import checked_context_size, resolve_context_size
from .http_json import post_json
from .openai_format import (
    choice_request,
    continuation_fields,
    generation_request,
    read_choice_scores,
    read_generation,
)
from .server_tokens import ServerFacts, discover
from .tokens import TokenCounter

T = TypeVar("T")

#: OpenAI caps ``top_logprobs`` at 20 and vLLM defaults to the same limit.
TOP_LOGPROBS = 20


def _env(*names: str) -> str:
    return next((os.environ[n] for n in names if os.environ.get(n)), "")


class OpenAICompatibleBackend:
    """Talks to ``{base_url}/chat/completions``; counts tokens with the server's own tokenizer where
    it offers one (:mod:`.server_tokens`)."""

    def __init__(self, model: str, *, base_url: str = "", api_key: str = "", concurrency: int = 8,
                 timeout: float = 600.0, top_logprobs: int = TOP_LOGPROBS, context_size: int | None = None) -> None:
        base_url = base_url or _env("WINNOW_OPENAI_BASE_URL", "OPENAI_BASE_URL")
        if not base_url:
            raise BackendError("no server address for the OpenAI-compatible backend",
                               "pass --base-url http://HOST:PORT/v1 or set WINNOW_OPENAI_BASE_URL")
        api_key = api_key or _env("WINNOW_OPENAI_API_KEY", "OPENAI_API_KEY")
        self._model = model
        self._base_url = base_url.rstrip("/")
        self._concurrency = max(1, concurrency)
        self.batch_size = self._concurrency
        self._top_logprobs = top_logprobs
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=self._base_url, headers=headers, timeout=timeout)
        self._requested_context = checked_context_size(context_size)
        self._server: ServerFacts | None = None
        self._context: tuple[int, str] = (0, "")
        self._lock = threading.Lock()

    @property
    def identity(self) -> dict[str, Any]:
        return {"backend": "openai", "model": self._model, "base_url": self._base_url}

    def _post(self, body: dict[str, Any]) -> tuple[Any, float, str]:
        """The parsed answer, the seconds it took and the raw body (shown when it cannot be read)."""
        body = {"model": self._model, **body, **continuation_fields(body["messages"])}
        started = time.perf_counter()
        response, sent = post_json(self._client, f"{self._base_url}/chat/completions", body, self._base_url)
        return response, time.perf_counter() - started, sent

    def _facts(self) -> ServerFacts:
        """What the server says about itself, asked once, when first needed (so that loading the
        backend does not need the server up)."""
        with self._lock:
            if self._server is None:
                self._server = discover(self._client, self._base_url, self._model)
                self._context = resolve_context_size(self._requested_context, self._server.context_size,
                                                     self._server.reporter)
            return self._server

    @property
    def context_size(self) -> int:
        """Tokens of prompt and answer the server holds (see :mod:`winnow.llm.context_size`)."""
        self._facts()
        return self._context[0]

    @property
    def context_size_source(self) -> str:
        self._facts()
        return self._context[1]

    @property
    def tokens(self) -> TokenCounter:
        """The server's tokenizer over /tokenize, or an estimate when it has none."""
        return self._facts().tokens

    def _each(self, prompts: Sequence[Messages], one: Callable[[Messages], T]) -> list[T]:
        if len(prompts) <= 1 or self._concurrency == 1:
            return [one(p) for p in prompts]
        with ThreadPoolExecutor(min(self._concurrency, len(prompts))) as pool:
            return list(pool.map(one, prompts))

    def generate(self, prompts: Sequence[Messages], *, max_tokens: int, temperature: float = 0.0,
                 stop: Sequence[str] = ()) -> list[Generation]:
        def one(messages: Messages) -> Generation:
            response, seconds, sent = self._post(generation_request(messages, max_tokens=max_tokens,
                                                                    temperature=temperature, stop=stop))
            return read_generation(response, seconds, self._base_url, sent, max_tokens=max_tokens)

        return self._each(prompts, one)

    def choice_logprobs(self, prompts: Sequence[Messages], choices: Sequence[str]) -> list[ChoiceScores]:
        def one(messages: Messages) -> ChoiceScores:
            response, seconds, sent = self._post(choice_request(messages, top_logprobs=self._top_logprobs))
            return read_choice_scores(response, choices, seconds, self._base_url, sent)

        return self._each(prompts, one)

    def close(self) -> None:
        self._client.close()
