"""Requests and responses in the OpenAI chat-completions and completions shapes.

Both backends speak them: llama.cpp's server object takes the same dict in-process that an
OpenAI-compatible server (vLLM, llama.cpp, TGI, hosted APIs) takes over HTTP, so building requests
and reading answers lives here once. A chat prompt (a list of turns) goes to chat completions; a
plain prompt (text, the ``plain`` framing) to completions, whose body holds ``prompt`` instead of
``messages`` and whose answer holds ``choices[0].text`` instead of ``choices[0].message.content``.
Answers are read defensively (:mod:`.response_checks`): a malformed one is a
:class:`~winnow.errors.BackendError` naming the server, never a crash.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from ..errors import BackendError
from . import response_checks as checks
from .base import ChoiceScores, Generation
from .choices import raw_choice_logprobs, scores_over_choices
from .messages import Prompt
from .response_checks import MalformedResponse, malformed, preview

#: The route of each request shape, under a server's ``/v1``.
CHAT_ROUTE, COMPLETION_ROUTE = "/chat/completions", "/completions"


def prompt_fields(prompt: Prompt) -> dict[str, Any]:
    """``{"messages": …}`` for a chat prompt, ``{"prompt": …}`` for plain text."""
    return {"prompt": prompt} if isinstance(prompt, str) else {"messages": prompt}


def route(body: dict[str, Any]) -> str:
    """Where a request built here goes: completions for a plain prompt, chat completions otherwise."""
    return COMPLETION_ROUTE if "prompt" in body else CHAT_ROUTE


def generation_request(prompt: Prompt, *, max_tokens: int, temperature: float,
                       stop: Sequence[str] = ()) -> dict[str, Any]:
    body: dict[str, Any] = {**prompt_fields(prompt), "max_tokens": max_tokens, "temperature": temperature}
    if temperature == 0.0:
        body["seed"] = 0
    if stop:
        body["stop"] = list(stop)
    return body


def choice_request(prompt: Prompt, *, top_logprobs: int) -> dict[str, Any]:
    # One output token is all we read; its top alternatives carry the choice probabilities.
    if isinstance(prompt, str):
        # Completions take the number of alternatives in ``logprobs`` itself (OpenAI caps it at 5;
        # llama.cpp and vLLM take more).
        return {"prompt": prompt, "max_tokens": 1, "temperature": 0.0, "seed": 0, "logprobs": top_logprobs}
    return {"messages": prompt, "max_tokens": 1, "temperature": 0.0, "seed": 0,
            "logprobs": True, "top_logprobs": top_logprobs}


def continuation_fields(messages: Prompt) -> dict[str, Any]:
    """Ask the server to continue a started ("prefilled") assistant turn rather than open a new one.

    llama.cpp's server continues a final assistant message by itself; vLLM needs
    ``continue_final_message`` (and no generation prompt), which llama.cpp ignores. Hosted APIs refuse
    the field or open a new turn: RRR's stages ask first (:mod:`.continuation`) and send them no started
    turn; ``WINNOW_OPENAI_CONTINUE=off`` says so without asking.
    """
    if (isinstance(messages, str) or not messages or messages[-1].get("role") != "assistant"
            or os.environ.get("WINNOW_OPENAI_CONTINUE") == "off"):
        return {}
    return {"continue_final_message": True, "add_generation_prompt": False}


def _first_choice(response: Any, source: str) -> dict[str, Any]:
    """``choices[0]`` of a chat-completions answer; an ``error`` object becomes its message."""
    if isinstance(response, dict) and response.get("error") is not None:
        error = response["error"]
        message = error.get("message") if isinstance(error, dict) else error
        shown = message if isinstance(message, str) else preview(error)
        raise BackendError(f"{source} returned an error: {' '.join(shown.split())[:500]}")
    checks.obj(response, "the response")
    return checks.obj(checks.items(response.get("choices"), "choices")[0], "choices[0]")


def _usage(response: dict[str, Any]) -> tuple[int, int]:
    """(prompt tokens, completion tokens); a server that reports no usage costs 0 (the spec makes
    ``usage`` optional), but a usage that is there must be counts."""
    usage = response.get("usage")
    if usage is None:
        return 0, 0
    checks.obj(usage, "usage")
    return (checks.count(usage.get("prompt_tokens"), "usage.prompt_tokens", optional=True),
            checks.count(usage.get("completion_tokens"), "usage.completion_tokens", optional=True))


def read_generation(response: Any, seconds: float, source: str, sent: Any = None, *,
                    max_tokens: int | None = None) -> Generation:
    """The generated text, its cost and why it stopped. ``sent`` is the raw body, shown in errors.

    A server that names no ``finish_reason`` but spent all ``max_tokens`` was cut by the limit, and
    the answer says "length", so a truncated answer never looks complete.
    """
    try:
        choice = _first_choice(response, source)
        if "message" not in choice and "text" in choice:  # a completions answer (plain framing)
            content = checks.text(choice.get("text"), "choices[0].text", optional=True)
        else:
            message = checks.obj(choice.get("message"), "choices[0].message")
            content = checks.text(message.get("content"), "choices[0].message.content", optional=True)
        finish_reason = checks.text(choice.get("finish_reason"), "choices[0].finish_reason", optional=True)
        prompt_tokens, completion_tokens = _usage(response)
    except MalformedResponse as exc:
        raise malformed(source, exc, response if sent is None else sent) from exc
    if not finish_reason and max_tokens is not None and completion_tokens >= max_tokens:
        finish_reason = "length"
    return Generation(content.strip(), prompt_tokens, completion_tokens, seconds, finish_reason)


def _legacy_alternatives(logprobs: dict[str, Any]) -> list[tuple[str, float]]:
    """The first token's alternatives in the legacy completions shape (OpenAI, vLLM):
    ``top_logprobs`` is a list, per output token, of ``{token: logprob}``."""
    where = "choices[0].logprobs.top_logprobs"
    first = checks.obj(checks.items(logprobs.get("top_logprobs"), where)[0], f"{where}[0]")
    return [(checks.text(token, f"{where}[0] key"), checks.logprob(value, f"{where}[0][{token!r}]"))
            for token, value in first.items()]


def _top_alternatives(choice: dict[str, Any], source: str) -> list[tuple[str, float]]:
    """(token, log-probability) of the first output token's top alternatives (or of the token
    itself when the server lists none).

    Chat completions list them under ``logprobs.content[0].top_logprobs``; so do llama.cpp's
    completions (checked against a real server), while OpenAI's and vLLM's completions use the
    legacy ``logprobs.top_logprobs[0]`` mapping. Both are read.
    """
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict) and logprobs.get("content") is None and logprobs.get("top_logprobs"):
        return _legacy_alternatives(logprobs)
    content = None if logprobs is None else checks.obj(logprobs, "choices[0].logprobs").get("content")
    if content is None or content == []:
        raise BackendError(
            f"{source} returned no log-probabilities",
            "the server must support `logprobs` (and `top_logprobs` in chat completions): vLLM, "
            "llama.cpp server and OpenAI do")
    where = "choices[0].logprobs.content"
    first = checks.obj(checks.items(content, where)[0], f"{where}[0]")
    listed = first.get("top_logprobs")
    entries = [] if listed is None else checks.items(listed, f"{where}[0].top_logprobs", nonempty=False)
    top = []
    for i, entry in enumerate(entries):
        at = f"{where}[0].top_logprobs[{i}]"
        entry = checks.obj(entry, at)
        top.append((checks.text(entry.get("token"), f"{at}.token"),
                    checks.logprob(entry.get("logprob"), f"{at}.logprob")))
    if not top:
        top = [(checks.text(first.get("token"), f"{where}[0].token"),
                checks.logprob(first.get("logprob"), f"{where}[0].logprob"))]
    return top


def read_choice_scores(response: Any, choices: Sequence[str], seconds: float, source: str, sent: Any = None
                       ) -> ChoiceScores:
    """Scores over ``choices`` from the first output token's top log-probabilities."""
    try:
        choice = _first_choice(response, source)
        top = _top_alternatives(choice, source)
        prompt_tokens, _ = _usage(response)
    except MalformedResponse as exc:
        raise malformed(source, exc, response if sent is None else sent) from exc
    logprobs, missing = scores_over_choices(top, choices)
    return ChoiceScores(logprobs, prompt_tokens, seconds, missing, raw_top=dict(top[:10]),
                        raw_logprobs=raw_choice_logprobs(top, choices)[0])
