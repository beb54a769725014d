"""What a model server says about itself: its tokenizer and its context size.

Two server families tokenize over HTTP, each at the server's root (not under ``/v1``):

- llama.cpp's server (also the one xllamacpp runs in-process): ``POST /tokenize`` ``{"content"}`` →
  ``{"tokens"}``, ``POST /detokenize`` ``{"tokens"}`` → ``{"content"}``, and ``POST /apply-template``
  ``{"messages"}`` → ``{"prompt"}``, the GGUF's chat template applied exactly as chat completions
  apply it. Its context per slot is ``default_generation_settings.n_ctx`` in ``GET /props``.
- vLLM: ``POST /tokenize`` ``{"model", "prompt"}`` or ``{"model", "messages", …}`` → ``{"count",
  "tokens", "max_model_len"}``, ``POST /detokenize`` → ``{"prompt"}``; ``GET /v1/models`` lists each
  model's ``max_model_len``.

Any other server gets the estimate of :class:`~winnow.llm.tokens.EstimatedTokens`, and the trace
says so, with the reason (no such route, or a route that kept failing). A server that is busy or
restarting at start-up (a 5xx, 429 or a timeout) is asked again a few times before it is judged,
since one 503 must not cut every passage of a run to the estimate's shorter length. Every answer is
read with :mod:`.response_checks`: a malformed one is a BackendError.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from . import response_checks as checks
from .dispatch import RetryPolicy
from .endpoint import RETRY_STATUSES
from .http_json import HttpClient, RequestTimedOut, post_json, send
from .messages import Prompt
from .openai_format import continuation_fields
from .response_checks import MalformedResponse, malformed
from .tokens import EstimatedTokens, ModelTokens, TokenCounter


def _read(reader: Callable[[Any], Any], value: Any, source: str, sent: Any) -> Any:
    try:
        return reader(value)
    except MalformedResponse as exc:
        raise malformed(source, exc, value if sent is None else sent) from exc


def _token_ids(value: Any) -> list[int]:
    tokens = checks.items(checks.obj(value, "the response").get("tokens"), "tokens", nonempty=False)
    return [checks.count(t, f"tokens[{i}]") for i, t in enumerate(tokens)]


def read_token_ids(response: Any, source: str, sent: Any = None) -> list[int]:
    """``tokens`` of a /tokenize answer (llama.cpp and vLLM alike): a list of token ids."""
    ids: list[int] = _read(_token_ids, response, source, sent)
    return ids


def read_text_field(response: Any, field: str, source: str, sent: Any = None) -> str:
    """A string field of an answer: /detokenize's ``content`` or ``prompt``, /apply-template's ``prompt``."""
    text: str = _read(lambda value: checks.text(checks.obj(value, "the response").get(field), field), response,
                      source, sent)
    return text


class _ServerRoutes:
    """POSTs to routes at a server's root, read by the readers above."""

    def __init__(self, client: HttpClient, root: str, source: str, fields: dict[str, Any]) -> None:
        self._client, self._root, self._source, self._fields = client, root, source, fields

    def ids(self, route: str, body: dict[str, Any]) -> list[int]:
        response, sent = post_json(self._client, f"{self._root}{route}", {**self._fields, **body}, self._source)
        return read_token_ids(response, self._source, sent)

    def text(self, route: str, body: dict[str, Any], field: str) -> str:
        response, sent = post_json(self._client, f"{self._root}{route}", {**self._fields, **body}, self._source)
        return read_text_field(response, field, self._source, sent)


class LlamaServerTokenIds:
    """llama.cpp's tokenizer and chat template, asked over its server's HTTP routes."""

    def __init__(self, client: HttpClient, root: str, source: str) -> None:
        self._routes = _ServerRoutes(client, root, source, {})

    def encode(self, text: str) -> list[int]:
        # parse_special off: a passage that contains "<|im_end|>" is text, not an end of turn.
        return self._routes.ids("/tokenize", {"content": text, "add_special": False, "parse_special": False})

    def decode(self, ids: Sequence[int]) -> str:
        return self._routes.text("/detokenize", {"tokens": list(ids)}, "content")

    def prompt_length(self, prompt: Prompt) -> int:
        # The same steps as llama.cpp's chat completions: template, then tokens with BOS and the
        # template's special tokens parsed (checked against its usage.prompt_tokens in the tests).
        # Its completions take a plain prompt through the same tokenization, without the template.
        if not isinstance(prompt, str):
            prompt = self._routes.text("/apply-template", {"messages": prompt}, "prompt")
        return len(self._routes.ids("/tokenize", {"content": prompt, "add_special": True, "parse_special": True}))


class VllmTokenIds:
    """vLLM's tokenizer and chat template, asked over its ``/tokenize`` and ``/detokenize`` routes."""

    def __init__(self, client: HttpClient, root: str, model: str, source: str) -> None:
        self._routes = _ServerRoutes(client, root, source, {"model": model})

    def encode(self, text: str) -> list[int]:
        return self._routes.ids("/tokenize", {"prompt": text, "add_special_tokens": False})

    def decode(self, ids: Sequence[int]) -> str:
        return self._routes.text("/detokenize", {"tokens": list(ids)}, "prompt")

    def prompt_length(self, prompt: Prompt) -> int:
        if isinstance(prompt, str):  # completions: the text with the model's special tokens added
            return len(self._routes.ids("/tokenize", {"prompt": prompt, "add_special_tokens": True}))
        # The continuation fields are the ones chat completions get (see continuation_fields).
        return len(self._routes.ids("/tokenize", {"messages": prompt, **continuation_fields(prompt)}))


#: How often a start-up question that meets a passing failure is asked again (about 4 s at most).
PROBE_RETRY = RetryPolicy(attempts=4, base_seconds=0.25, cap_seconds=2.0)


def probe_json(client: HttpClient, method: str, url: str, body: Any = None,
               retry: RetryPolicy | None = None) -> tuple[Any, str]:
    """(the JSON a request answers, "") or (None, why not): the route is missing or refused ("answered
    404"), its body is not JSON, or it kept failing ("answered 503 on 4 attempts"). A passing failure
    (a status a busy server answers, a timeout) is asked again; only an unreachable server is an error."""
    retry = retry or PROBE_RETRY
    rng = random.Random(0)
    why = ""
    for attempt in range(retry.attempts):
        try:
            response = send(client, method, url, body)
        except RequestTimedOut:
            why = "timed out"
        else:
            if response.status_code == 200:
                try:
                    return response.json(), ""
                except (ValueError, RecursionError):
                    return None, "answered 200 with a body that is not JSON"
            why = f"answered {response.status_code}"
            if response.status_code not in RETRY_STATUSES:
                return None, why
        if attempt + 1 < retry.attempts:
            time.sleep(retry.delay(attempt, rng))
    return None, f"{why} on {retry.attempts} attempts"


def json_or_none(client: HttpClient, method: str, url: str, body: Any = None) -> Any:
    """The JSON a request answers, or None (see :func:`probe_json`)."""
    return probe_json(client, method, url, body)[0]


@dataclass(frozen=True)
class ServerFacts:
    """What :func:`discover` learnt: the server family, its context size (None if it reports none)
    and how that size was read, and the token counter to use."""

    kind: str
    context_size: int | None
    reporter: str
    tokens: TokenCounter


def count_at(value: Any, *path: str | int) -> int | None:
    """The count at ``path`` inside ``value``, or None if anything on the way is missing or wrong."""
    for key in path:
        if isinstance(key, int):
            value = value[key] if isinstance(value, list) and len(value) > key else None
        else:
            value = value.get(key) if isinstance(value, dict) else None
    try:
        return checks.count(value, "") or None
    except MalformedResponse:
        return None


def read_vllm_context(models: Any, model: str) -> int | None:
    """``max_model_len`` of ``model`` in a ``GET /v1/models`` answer (of its only model if no id
    matches), or None."""
    data = models.get("data") if isinstance(models, dict) else None
    if not isinstance(data, list):
        return None
    entries = [e for e in data if isinstance(e, dict)]
    chosen = [e for e in entries if e.get("id") == model] or (entries if len(entries) == 1 else [])
    return count_at(chosen, 0, "max_model_len") if chosen else None


def root_of(base_url: str) -> str:
    """The server's root: tokenizer and /props routes live beside ``/v1``, not under it."""
    return base_url[:-3] if base_url.endswith("/v1") else base_url


def llama_server_context(client: HttpClient, root: str) -> tuple[int | None, str] | None:
    """(context per slot, how it was read) from a llama.cpp server's /props (or /slots), or None
    if the server at ``root`` is not a llama.cpp server."""
    props = json_or_none(client, "GET", f"{root}/props")
    if not (isinstance(props, dict) and isinstance(props.get("default_generation_settings"), dict)):
        return None
    n_ctx = count_at(props, "default_generation_settings", "n_ctx")
    if n_ctx is not None:
        return n_ctx, "the server's /props (n_ctx per slot)"
    return count_at(json_or_none(client, "GET", f"{root}/slots"), 0, "n_ctx"), "the server's /slots"


def discover(client: HttpClient, base_url: str, model: str) -> ServerFacts:
    """Ask the server at ``base_url`` what it is (one to three small GETs, one tiny POST)."""
    root = root_of(base_url)
    llama = llama_server_context(client, root)
    if llama is not None:
        n_ctx, reporter = llama
        return ServerFacts("llama.cpp", n_ctx, reporter, ModelTokens(
            LlamaServerTokenIds(client, root, base_url), f"exact: llama.cpp server's /tokenize at {root}"))
    context = read_vllm_context(json_or_none(client, "GET", f"{base_url}/models"), model)
    answer, why = probe_json(client, "POST", f"{root}/tokenize", {"model": model, "prompt": "Winnow"})
    if isinstance(answer, dict) and isinstance(answer.get("tokens"), list):
        context = context or count_at(answer, "max_model_len")
        return ServerFacts("vLLM", context, "the server's max_model_len", ModelTokens(
            VllmTokenIds(client, root, model, base_url), f"exact: the server's /tokenize at {root}"))
    if answer is not None:
        why = "answered 200 without a list of tokens"
    gone = why.startswith("answered 4") and " on " not in why  # 404, 405: the route is not there
    reason = (f"{root} offers no /tokenize (it {why})" if gone
              else f"{root}/tokenize {why}, so the server's tokenizer could not be used")
    estimate = EstimatedTokens(f"estimated ({EstimatedTokens.RULE}): {reason}")
    return ServerFacts("unknown", context, "the server's max_model_len", estimate)
