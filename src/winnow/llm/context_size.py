"""How many tokens a model's context holds (prompt and answer together), and where that figure came from.

A backend knows its context size from the best source it has: llama.cpp in-process from the
context it was started with (``context_size``, default 4,096); an OpenAI-compatible server from what
it reports (llama.cpp server's ``/props``, vLLM's ``max_model_len``); transformers from the model's
``max_position_embeddings``. A size the user gives is used when the server reports none, and is
honoured when it is smaller than what the server reports (a larger one could only fail). With
neither, :data:`DEFAULT_CONTEXT_SIZE` applies and the source says so.
"""

from __future__ import annotations

from ..errors import WinnowError

#: The context assumed when neither the server nor the user says: small enough for any model
#: Winnow knows (and llama.cpp's own default in Winnow), so fitting errs towards shorter prompts.
DEFAULT_CONTEXT_SIZE = 4096
#: A prompt needs room for instructions, a question and some passage text.
SMALLEST_CONTEXT_SIZE = 64


def checked_context_size(requested: int | None) -> int | None:
    """``requested`` if it is a usable context size (None stays None); a WinnowError names the option."""
    if requested is None:
        return None
    if isinstance(requested, bool) or not isinstance(requested, int) or requested < SMALLEST_CONTEXT_SIZE:
        raise WinnowError(f"context_size must be a whole number of tokens, at least {SMALLEST_CONTEXT_SIZE} "
                          f"(got {requested!r})", "e.g. context_size=4096")
    return requested


def resolve_context_size(requested: int | None, reported: int | None, reporter: str) -> tuple[int, str]:
    """(context size, where it came from) from the user's ``requested`` size and the size the backend
    ``reported`` (``reporter`` says how it was read, e.g. "the server's /props")."""
    requested = checked_context_size(requested)
    if reported and requested:
        if requested <= reported:
            return requested, f"context_size={requested} ({reporter} allows {reported})"
        return reported, f"{reporter}: {reported} (context_size={requested} was asked, more than it allows)"
    if reported:
        return reported, f"{reporter}: {reported}"
    if requested:
        return requested, f"context_size={requested}"
    return DEFAULT_CONTEXT_SIZE, (f"the default {DEFAULT_CONTEXT_SIZE}: the backend reports no context size "
                                  "(set context_size to the model's real one)")
