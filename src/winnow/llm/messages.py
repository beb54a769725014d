"""A prompt as every backend takes it: chat turns, or plain text.

``Messages`` (a list of ``{"role", "content"}`` turns) goes through the model's chat template and a
chat-completions route. A ``str`` is a prompt already framed as text (RankRAG Appendix D's "System:
… User: … Assistant:", the ``plain`` framing): it is sent as a raw completion, no template applied.
"""

from __future__ import annotations

Messages = list[dict[str, str]]
Prompt = Messages | str

#: The role a plain prompt is recorded under in a trace's ``messages``, so readers of the trace
#: (the inspector, reports) show the exact text sent.
PLAIN_ROLE = "plain"


def is_plain(prompt: Prompt) -> bool:
    """Whether ``prompt`` is plain text, sent as a raw completion."""
    return isinstance(prompt, str)


def prompt_chars(prompt: Prompt) -> int:
    """Characters of the prompt's text (the template's markers not counted)."""
    return len(prompt) if isinstance(prompt, str) else sum(len(m["content"]) for m in prompt)


def recorded(prompt: Prompt) -> Messages:
    """The prompt as a trace records it: chat turns as they are, plain text as one ``plain`` turn."""
    return [{"role": PLAIN_ROLE, "content": prompt}] if isinstance(prompt, str) else list(prompt)
