"""Does a server continue a started ("prefilled") assistant turn? Asked once per backend.

RRR's σ and rewrite prompts (Arora et al., 2023, App. A.1 and A.2) ask for ``<<Score>>n<</Score>>``
and ``<<Rewrite>>…``; Winnow starts the answer with the opening tag so that the grade is the next
token, read from one forward pass. llama.cpp (in process or as a server) and transformers continue
such a turn by themselves; vLLM needs ``continue_final_message``, a field of its own that hosted APIs
either refuse (OpenAI answers 400 to an unknown field) or ignore, opening a new assistant turn after
the started one. On those the prefilled prompt is either an error or a grade read from the wrong
place, so the stages ask first (:func:`continuation_support`) and, where the turn is not continued,
send no prefill (:mod:`winnow.stages.graded`'s first-token prompt).

The probe is one short generation: the user asks to count from 1 to 10 and the assistant's turn is
started with "1, 2, 3, 4,". A server that continues the turn answers "5…" (llama.cpp's server with
the started part before it: "1, 2, 3, 4, 5,"); one that opens a new turn starts again from 1 (or
says "Sure") and, in four tokens, cannot get as far as "4,". A refused probe is asked again without the started turn: if
that succeeds the field (or the started turn) was what the server refused; if it fails too, the
server's own error is raised. The probe's calls are made through the stage's LLM, so they are in
the stage's usage and in App. B's cost split like any other call (a refused request cost no tokens
and is in no usage; ``probe_calls`` counts it).
"""

from __future__ import annotations

import os
import re
import threading
import weakref
from dataclasses import dataclass

from ..errors import BackendError
from ..records import StageTrace
from .base import Messages
from .client import LLM

PROBE: Messages = [{"role": "user", "content": "Count from 1 to 10 in digits, separated by commas."},
                   {"role": "assistant", "content": "1, 2, 3, 4,"}]
PROBE_TOKENS = 4
_FIRST_NUMBER = re.compile(r"[0-9]+")


@dataclass(frozen=True, slots=True)
class Continuation:
    """What was found: whether a started turn is continued, how that was known, and the calls it took."""

    continues: bool
    how: str
    probe_calls: int = 0


_known: weakref.WeakKeyDictionary[object, Continuation] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def continuation_support(llm: LLM, stage: StageTrace) -> Continuation:
    """Whether ``llm``'s backend continues a started assistant turn; probed on the first call for a
    backend (its calls recorded in ``stage``), remembered for the backend's life after that (later
    calls report ``probe_calls = 0``)."""
    backend = llm.backend
    with _lock:  # one probe per backend, even when several stages ask at once
        known = _known.get(backend)
        if known is not None:
            return Continuation(known.continues, known.how)
        found = _detect(llm, stage)
        try:
            _known[backend] = found
        except TypeError:  # a backend that cannot be weakly referenced is probed each time
            pass
        return found


def _detect(llm: LLM, stage: StageTrace) -> Continuation:
    if llm.identity.get("backend") != "openai":
        return Continuation(True, f"{llm.identity.get('backend', 'the backend')} continues a started turn itself")
    if os.environ.get("WINNOW_OPENAI_CONTINUE") == "off":
        return Continuation(False, "WINNOW_OPENAI_CONTINUE=off")
    try:
        text = llm.generate([PROBE], stage=stage, max_tokens=PROBE_TOKENS)[0].text
    except BackendError as refused:
        try:
            llm.generate([PROBE[:1]], stage=stage, max_tokens=PROBE_TOKENS)
        except BackendError:
            raise refused from None
        reason = " ".join(str(refused).split())[:200]
        return Continuation(False, f"refused: {reason}", probe_calls=2)
    # llama.cpp's server returns the started part with its continuation ("1, 2, 3, 4, 5,"). A server
    # that opened a new turn cannot echo it instead: four tokens do not reach "4," counting from 1.
    answer = text.strip().removeprefix(str(PROBE[-1]["content"]))
    first = _FIRST_NUMBER.search(answer)
    if first is not None and first.group() == "5":
        return Continuation(True, "continued (probe)", probe_calls=1)
    return Continuation(False, f"not continued: the probe answered {text[:40]!r}", probe_calls=1)


def forget(llm: LLM) -> None:
    """Drop what is known about ``llm``'s backend (a server restarted with other settings)."""
    with _lock:
        _known.pop(llm.backend, None)
