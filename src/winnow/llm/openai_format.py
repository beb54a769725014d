"""Requests and responses in the OpenAI chat-completions shape.

Both backends speak it: llama.cpp's server object takes the same dict in-process that an
OpenAI-compatible server (vLLM, llama.cpp, TGI, hosted APIs) takes over HTTP, so building requests
and reading answers lives here once.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..errors import BackendError
from .base import ChoiceScores, Generation, Messages
from .choices import scores_over_choices


def generation_request(messages: Messages, *, max_tokens: int, temperature: float,
                       stop: Sequence[str] = ()) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": messages, "max_tokens": max_tokens, "temperature": temperature}
    if temperature == 0.0:
        body["seed"] = 0
    if stop:
        body["stop"] = list(stop)
    return body


def choice_request(messages: Messages, *, top_logprobs: int) -> dict[str, Any]:
    # One output token is all we read; its top alternatives carry the choice probabilities.
    return {"messages": messages, "max_tokens": 1, "temperature": 0.0, "seed": 0,
            "logprobs": True, "top_logprobs": top_logprobs}


def _checked_choice(response: dict[str, Any], source: str) -> dict[str, Any]:
    if "error" in response:
        error = response["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        raise BackendError(f"{source} returned an error: {message}")
    try:
        return response["choices"][0]
    except (KeyError, IndexError, TypeError) as exc:
        raise BackendError(f"{source} returned a response without choices: {str(response)[:300]}") from exc


def _usage(response: dict[str, Any]) -> tuple[int, int]:
    usage = response.get("usage") or {}
    return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)


def read_generation(response: dict[str, Any], seconds: float, source: str) -> Generation:
    choice = _checked_choice(response, source)
    text = (choice.get("message") or {}).get("content") or ""
    prompt_tokens, completion_tokens = _usage(response)
    return Generation(text.strip(), prompt_tokens, completion_tokens, seconds, choice.get("finish_reason") or "")


def read_choice_scores(response: dict[str, Any], choices: Sequence[str], seconds: float, source: str
                       ) -> ChoiceScores:
    choice = _checked_choice(response, source)
    try:
        first = choice["logprobs"]["content"][0]
    except (KeyError, IndexError, TypeError) as exc:
        raise BackendError(
            f"{source} returned no log-probabilities",
            "the server must support `logprobs` and `top_logprobs` in chat completions "
            "(vLLM, llama.cpp server and OpenAI do)") from exc
    top = [(entry["token"], float(entry["logprob"])) for entry in first.get("top_logprobs") or []]
    if not top:
        top = [(first["token"], float(first["logprob"]))]
    logprobs, missing = scores_over_choices(top, choices)
    prompt_tokens, _ = _usage(response)
    return ChoiceScores(logprobs, prompt_tokens, seconds, missing, raw_top=dict(top[:10]))
