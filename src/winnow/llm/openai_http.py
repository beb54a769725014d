"""Any OpenAI-compatible chat-completions server: vLLM, llama.cpp's server, TGI, hosted APIs.

Set the base URL (``.../v1``) and key by option or by ``WINNOW_OPENAI_BASE_URL`` /
``WINNOW_OPENAI_API_KEY`` (``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` are honoured too). Requests in a
batch are sent concurrently, since a server batches them far better than we can.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence, TypeVar

import httpx

from ..errors import BackendError
from .base import ChoiceScores, Generation, Messages
from .openai_format import choice_request, generation_request, read_choice_scores, read_generation
from .response_checks import preview, read_json

T = TypeVar("T")

#: OpenAI caps ``top_logprobs`` at 20 and vLLM defaults to the same limit.
TOP_LOGPROBS = 20


def _env(*names: str) -> str:
    return next((os.environ[n] for n in names if os.environ.get(n)), "")


def continuation_fields(messages: Messages) -> dict[str, Any]:
    """Ask the server to continue a started ("prefilled") assistant turn rather than open a new one.

    llama.cpp's server continues a final assistant message by itself; vLLM needs
    ``continue_final_message`` (and no generation prompt), which llama.cpp ignores. Hosted APIs that
    reject unknown fields can be served with ``WINNOW_OPENAI_CONTINUE=off``: the graded reranker then
    reads its score from the generated ``<<Score>>n`` text instead.
    """
    if not messages or messages[-1].get("role") != "assistant" or os.environ.get("WINNOW_OPENAI_CONTINUE") == "off":
        return {}
    return {"continue_final_message": True, "add_generation_prompt": False}


class OpenAICompatibleBackend:
    """Talks to ``{base_url}/chat/completions``."""

    def __init__(self, model: str, *, base_url: str = "", api_key: str = "", concurrency: int = 8,
                 timeout: float = 600.0, top_logprobs: int = TOP_LOGPROBS) -> None:
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

    @property
    def identity(self) -> dict[str, Any]:
        return {"backend": "openai", "model": self._model, "base_url": self._base_url}

    def _post(self, body: dict[str, Any]) -> tuple[Any, float, str]:
        """The parsed answer, the seconds it took and the raw body (shown when it cannot be read)."""
        body = {"model": self._model, **body, **continuation_fields(body["messages"])}
        started = time.perf_counter()
        try:
            response = self._client.post("/chat/completions", json=body)
        except httpx.TransportError as exc:
            raise BackendError(f"cannot reach {self._base_url}/chat/completions: {exc}",
                               "is the server running, and is --base-url right (it usually ends in /v1)?") from exc
        seconds = time.perf_counter() - started
        if response.status_code in (401, 403):
            raise BackendError(f"{self._base_url} refused the request ({response.status_code})",
                               "set the key with --api-key or WINNOW_OPENAI_API_KEY")
        if response.status_code >= 400:
            raise BackendError(f"{self._base_url}/chat/completions answered {response.status_code}: "
                               f"{preview(response.text, 500)}")
        return read_json(response, self._base_url), seconds, response.text

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
            return read_generation(response, seconds, self._base_url, sent)

        return self._each(prompts, one)

    def choice_logprobs(self, prompts: Sequence[Messages], choices: Sequence[str]) -> list[ChoiceScores]:
        def one(messages: Messages) -> ChoiceScores:
            response, seconds, sent = self._post(choice_request(messages, top_logprobs=self._top_logprobs))
            return read_choice_scores(response, choices, seconds, self._base_url, sent)

        return self._each(prompts, one)

    def close(self) -> None:
        self._client.close()
