"""Any OpenAI-compatible chat-completions server: vLLM, llama.cpp's server, TGI, hosted APIs.

Chat prompts go to ``/chat/completions``; plain prompts (the ``plain`` framing) to ``/completions``,
sent as they are.

Set the base URL (``.../v1``) and key by option or by ``WINNOW_OPENAI_BASE_URL`` /
``WINNOW_OPENAI_API_KEY`` (``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` are honoured too). All the requests of
a stage are handed to :mod:`.dispatch`, which keeps up to ``max_inflight`` of them in flight over one or
several endpoints, since a server batches them far better than we can.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

from ..errors import BackendError
from ..models.loading import ModelSource
from .base import ChoiceScores, Generation
from .context_size import checked_context_size, resolve_context_size
from .dispatch import DEFAULT_TIMEOUT_SECONDS, BreakerPolicy, Dispatcher, Endpoint, RetryPolicy
from .hf_tokens import check_against, load_tokenizer
from .messages import Prompt
from .openai_format import (
    choice_request,
    continuation_fields,
    generation_request,
    read_choice_scores,
    read_generation,
    route,
)
from .served_model import served_source
from .server_tokens import ServerFacts, discover
from .tokens import ModelTokens, TokenCounter

#: Requests in flight by default: enough to keep a batching server (vLLM, TGI) busy; lower it for a
#: llama.cpp server with few slots, raise it to the server's capacity of concurrent sequences.
MAX_INFLIGHT = 64

#: OpenAI caps ``top_logprobs`` at 20 and vLLM defaults to the same limit.
TOP_LOGPROBS = 20


def _env(*names: str) -> str:
    return next((os.environ[n] for n in names if os.environ.get(n)), "")


def base_urls(given: str | Sequence[str]) -> list[str]:
    """The endpoint addresses of ``--base-url`` (repeatable; one option may also hold several,
    comma-separated, as a config file or a recorded run spec does)."""
    parts = [given] if isinstance(given, str) else list(given)
    return [url.strip().rstrip("/") for part in parts for url in part.split(",") if url.strip()]


class OpenAICompatibleBackend:
    """Talks to ``{base_url}/chat/completions`` on one or several endpoints through a
    :class:`~winnow.llm.dispatch.Dispatcher` (at most ``max_inflight`` requests in flight,
    least-loaded, retried on passing failures); counts tokens with the first server's own tokenizer
    where it offers one (:mod:`.server_tokens`) and fits prompts to the smallest context any endpoint
    reports."""

    #: Many threads may call it at once (the dispatcher bounds the requests in flight): `winnow serve`
    #: runs concurrent requests on it rather than one at a time.
    concurrent_callers = True

    def __init__(self, model: str, *, base_url: str | Sequence[str] = "", api_key: str = "",
                 max_inflight: int = MAX_INFLIGHT, timeout: float = DEFAULT_TIMEOUT_SECONDS,
                 top_logprobs: int = TOP_LOGPROBS, context_size: int | None = None, retry: RetryPolicy | None = None,
                 breaker: BreakerPolicy | None = None, headers: Mapping[str, str] | None = None,
                 tokenizer: str = "", hedge: float | None = None) -> None:
        urls = base_urls(base_url or _env("WINNOW_OPENAI_BASE_URL", "OPENAI_BASE_URL"))
        if not urls:
            raise BackendError("no server address for the OpenAI-compatible backend",
                               "pass --base-url http://HOST:PORT/v1 or set WINNOW_OPENAI_BASE_URL")
        if max_inflight < 1:
            raise BackendError(f"--max-inflight must be at least 1 (got {max_inflight})")
        if not timeout > 0:
            raise BackendError(f"--timeout must be above 0 seconds (got {timeout})")
        api_key = api_key or _env("WINNOW_OPENAI_API_KEY", "OPENAI_API_KEY")
        self._model = model
        self._base_url = ",".join(urls)
        self.max_inflight = max_inflight
        self._top_logprobs = top_logprobs
        # A gateway's own headers (Azure's api-key, a proxy's token): ``headers``, or WINNOW_OPENAI_HEADERS as JSON.
        sent = {**gateway_headers(os.environ.get("WINNOW_OPENAI_HEADERS", "")), **dict(headers or {})}
        if api_key:
            sent.setdefault("Authorization", f"Bearer {api_key}")
        self.timeout = timeout  # seconds per attempt of one call (each retry gets as long again)
        self.dispatcher = Dispatcher([Endpoint(url, sent, timeout, max_inflight) for url in urls],
                                     max_inflight, retry, breaker=breaker, hedge_seconds=hedge)
        self._requested_context = checked_context_size(context_size)
        self._server: ServerFacts | None = None
        self._context: tuple[int, str] = (0, "")
        # --tokenizer: counted here (winnow.llm.hf_tokens), loaded now so that a bad one fails at start.
        self._tokenizer_spec = tokenizer
        self._local_tokens = load_tokenizer(tokenizer) if tokenizer else None
        self._lock = threading.Lock()
        self.tokens_done = 0  # prompt + completion tokens of the requests answered so far (progress)
        self._served: tuple[ModelSource | None, str] | None = None  # asked once, when a method first needs it
        self._noted = False

    @property
    def identity(self) -> dict[str, Any]:
        return {"backend": "openai", "model": self._model, "base_url": self._base_url}

    def _served_model(self) -> tuple[ModelSource | None, str]:
        if self._served is None:
            endpoint = self.dispatcher.endpoints[0]  # the endpoints serve one model
            self._served = served_source(endpoint, endpoint.base_url, self._model)
        return self._served

    @property
    def source(self) -> ModelSource | None:
        """The served model with the training record found for it here (:mod:`.served_model`), or None:
        what a method checks its framing against (:func:`winnow.models.loading.check_trained_framing`)."""
        return self._served_model()[0]

    def source_note(self) -> str:
        """Once per backend: why the served model's framing could not be checked ("" when it was, or
        when no record is known of the model, as for a hosted one)."""
        note = "" if self._noted else self._served_model()[1]
        self._noted = True
        return note

    @property
    def inflight(self) -> int:
        """Requests on the wire right now."""
        return self.dispatcher.inflight

    def dispatch_stats(self) -> dict[str, Any]:
        """Calls, retries, failovers and each endpoint's health (:meth:`Dispatcher.stats`)."""
        return self.dispatcher.stats()

    def endpoint_health(self) -> dict[str, dict[str, Any]]:
        """Each endpoint's breaker state and whether it takes requests now (:meth:`Dispatcher.health`)."""
        return self.dispatcher.health()

    def _answered(self, tokens: int) -> None:
        with self._lock:
            self.tokens_done += tokens

    def _request(self, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """(route, body) of one call: the model named, continuation fields added (see there)."""
        body = {"model": self._model, **body, **continuation_fields(body.get("messages", []))}
        return route(body), body

    def _facts(self) -> ServerFacts:
        """What the servers say about themselves, asked once, when first needed (so that loading
        the backend does not need the server up). The tokenizer is the first server's (the endpoints
        serve one model); the context is the smallest any endpoint reports, since a call may go to any
        of them and a prompt fitted to a larger one would be refused by a smaller one."""
        if self._server is not None:  # asked once; then read without the lock (prompt fitting reads
            return self._server  # it a score of times a call, from every question thread)
        with self._lock:
            if self._server is None:
                facts = [(endpoint.base_url, discover(endpoint, endpoint.base_url, self._model))
                         for endpoint in self.dispatcher.endpoints]
                # The first endpoint whose tokenizer answers: a dead first endpoint must not demote
                # the whole run to the estimate while another serves the same model.
                server = next((fact for _, fact in facts if fact.tokens.exact), facts[0][1])
                reported, reporter = facts[0][1].context_size, facts[0][1].reporter
                known = [(fact.context_size, url, fact.reporter) for url, fact in facts if fact.context_size]
                if len(facts) > 1 and known:
                    reported, smallest_at, reporter = min(known)
                    reporter = (f"{reporter} of {smallest_at}, the smallest of its {len(facts)} endpoints ("
                                + ", ".join(f"{url}: {fact.context_size or 'none reported'}" for url, fact in facts)
                                + ")")
                self._context = resolve_context_size(self._requested_context, reported, reporter)
                if self._local_tokens is not None:
                    server = replace(server, tokens=self._counted_here(server.tokens))
                self._server = server  # last: a thread that sees it unlocked also sees the context
            return self._server

    def _counted_here(self, servers: TokenCounter) -> TokenCounter:
        """The --tokenizer's counter, checked against the server's own tokenizer where it has one."""
        assert self._local_tokens is not None
        ids, name = self._local_tokens
        if isinstance(servers, ModelTokens):
            check_against(ids, servers.ids, self._tokenizer_spec, servers.description.removeprefix("exact: "))
            checked = f"agrees with {servers.description.removeprefix('exact: ')}"
        else:
            checked = "not checked: the server has no tokenizer to check it against"
        return ModelTokens(ids, f"exact: --tokenizer {name}, counted here ({checked})")

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

    def generate(self, prompts: Sequence[Prompt], *, max_tokens: int, temperature: float = 0.0,
                 stop: Sequence[str] = (), on_done: Callable[[int], None] | None = None) -> list[Generation]:
        def read(endpoint: Endpoint, response: Any, seconds: float, sent: str) -> Generation:
            generation = read_generation(response, seconds, endpoint.base_url, sent, max_tokens=max_tokens)
            self._answered(generation.prompt_tokens + generation.completion_tokens)
            return generation

        requests = [self._request(generation_request(prompt, max_tokens=max_tokens, temperature=temperature,
                                                     stop=stop)) for prompt in prompts]
        return [replace(g, retries=r) for g, r in self.dispatcher.map(requests, read, on_done)]

    def choice_logprobs(self, prompts: Sequence[Prompt], choices: Sequence[str],
                        on_done: Callable[[int], None] | None = None) -> list[ChoiceScores]:
        def read(endpoint: Endpoint, response: Any, seconds: float, sent: str) -> ChoiceScores:
            scores = read_choice_scores(response, choices, seconds, endpoint.base_url, sent)
            self._answered(scores.prompt_tokens + 1)  # one output token is generated
            return scores

        requests = [self._request(choice_request(prompt, top_logprobs=self._top_logprobs)) for prompt in prompts]
        return [replace(s, retries=r) for s, r in self.dispatcher.map(requests, read, on_done)]

    def close(self) -> None:
        self.dispatcher.close()


def gateway_headers(text: str) -> dict[str, str]:
    """``WINNOW_OPENAI_HEADERS``: a JSON object of header name -> value sent with every request
    (e.g. ``{"api-key": "…"}`` for Azure OpenAI); empty for none, one clear error when malformed."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise BackendError(f"WINNOW_OPENAI_HEADERS is not JSON: {exc}",
                           'give a JSON object, e.g. WINNOW_OPENAI_HEADERS=\'{"api-key": "KEY"}\'') from exc
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise BackendError("WINNOW_OPENAI_HEADERS must be a JSON object of header name to text value",
                           'e.g. WINNOW_OPENAI_HEADERS=\'{"api-key": "KEY"}\'')
    return value
