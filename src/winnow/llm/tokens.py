"""Counting and cutting text in a model's own tokens, or an estimate that says it is one.

Every backend offers the same three questions: how many tokens a text is, the text cut to at most
``n`` tokens, and how many tokens a whole chat prompt is once the model's chat template is applied
(as the backend sends it). :class:`ModelTokens` answers them with the model's tokenizer (llama.cpp's,
transformers', or an OpenAI-compatible server's ``/tokenize``), caching counts per text because the
same passages are measured by stage after stage. :class:`EstimatedTokens` is the fallback for a
server that cannot tokenize (a hosted API): 4.4 characters a token for ASCII text and 2 UTF-8 bytes
a token for the rest, plus a few tokens of chat template per message. The figure was measured on 400
English Wikipedia passages (the wiki-vital corpus, seed 0): SmolLM2's tokenizer averages 4.72 bytes
a token and Qwen2.5's (a relative of GPT-3.5/4's cl100k) 4.67, so 4.4 over-counts English by 6-7%
on average, the slack a prompt of many passages keeps. One passage alone can be denser (5th
percentile 3.71, least 2.79 bytes a token: numbers and names), which the prompt's other passages
make up for; a prompt of only such text can overflow a server's context, which the server then
refuses (a count from the model's tokenizer, `--tokenizer`, has no such risk). The old rule, 3 bytes
a token, cut RankGPT's twenty 300-word passages to 61 words each in a 4,096-token window where
GPT-3.5's own count keeps about 150. Non-ASCII text is counted densely (a CJK character is 3 bytes
and about one token; an accented letter 2 bytes inside a longer token), so it over-counts. Fitting
built on an estimate can still overflow a server's context, so the trace says which kind of count
was used.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from typing import Protocol, Sequence

from .messages import Prompt

#: Distinct texts (and prompts) whose counts are remembered per model.
CACHED_TEXTS = 8192


class TokenIds(Protocol):
    """What a model's tokenizer offers; implemented per backend."""

    def encode(self, text: str) -> list[int]:
        """The tokens of ``text`` as a passage inside a prompt (no special tokens added)."""

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``."""

    def prompt_length(self, prompt: Prompt) -> int:
        """Tokens of the prompt as the backend sends it: a chat prompt with its chat template,
        generation prompt or continued assistant turn and special tokens; plain text as the
        completion route tokenizes it (with the model's beginning-of-text token)."""


class TokenCounter(Protocol):
    """The three questions stages ask about tokens (see the module notes)."""

    exact: bool
    description: str

    def count(self, text: str) -> int: ...

    def truncate(self, text: str, max_tokens: int) -> tuple[str, bool]: ...

    def count_prompt(self, prompt: Prompt) -> int: ...


class ModelTokens:
    """Exact counts from a model's tokenizer, remembered per text.

    Cutting a long text tokenizes only a prefix of it, grown until it holds comfortably more than
    ``max_tokens`` tokens, so cutting a 50 MB passage to 300 tokens costs what cutting a page does.
    """

    exact = True
    #: Tokens beyond the cut that a prefix must hold before its first ``max_tokens`` are trusted:
    #: a tokenizer's choice near the end of a prefix can depend on the characters after it.
    MARGIN = 16
    #: Characters per token to try first when cutting: more than prose in any script needs.
    FIRST_CHARS_PER_TOKEN = 8

    def __init__(self, ids: TokenIds, description: str) -> None:
        self._ids = ids
        self.description = description
        self._count = lru_cache(maxsize=CACHED_TEXTS)(lambda text: len(ids.encode(text)))
        self._prompt = lru_cache(maxsize=CACHED_TEXTS)(lambda key: ids.prompt_length(json.loads(key)))

    @property
    def ids(self) -> TokenIds:
        """The tokenizer the counts come from."""
        return self._ids

    def count(self, text: str) -> int:
        return self._count(text) if text else 0

    def count_prompt(self, prompt: Prompt) -> int:
        return self._prompt(json.dumps(prompt, ensure_ascii=False, sort_keys=True))

    def _leading(self, text: str, max_tokens: int) -> tuple[list[int], bool]:
        """The first ``max_tokens`` tokens of ``text``, and whether it has more."""
        chars = max_tokens * self.FIRST_CHARS_PER_TOKEN + 64
        while chars < len(text):
            ids = self._ids.encode(text[:chars])
            if len(ids) > max_tokens + self.MARGIN:
                return ids[:max_tokens], True
            chars *= 4
        ids = self._ids.encode(text)
        return ids[:max_tokens], len(ids) > max_tokens

    def truncate(self, text: str, max_tokens: int) -> tuple[str, bool]:
        """``text`` cut to at most ``max_tokens`` tokens, and whether anything was cut."""
        if max_tokens < 0:
            raise ValueError(f"max_tokens must be at least 0 (got {max_tokens})")
        if not text:
            return text, False
        ids, longer = self._leading(text, max_tokens)
        if not longer:
            return text, False
        keep = len(ids)
        while keep > 0:
            # A cut inside a multi-byte character decodes to U+FFFD; drop the partial character.
            cut = self._ids.decode(ids[:keep]).rstrip("\ufffd")
            # Decoded text can tokenize differently from the ids it came from (rarely a token
            # more); step back by the excess until the promise "at most max_tokens" holds.
            excess = self.count(cut) - max_tokens
            if excess <= 0:
                return cut, True
            keep -= excess
        return "", True


class EstimatedTokens:
    """An estimate for servers that cannot tokenize (see the module notes for the rule)."""

    exact = False
    #: ASCII characters a token (English text measured at 4.67-4.72: see the module notes)
    BYTES_PER_TOKEN = 4.4
    #: UTF-8 bytes a token of the text's other characters
    OTHER_BYTES_PER_TOKEN = 2
    RULE = "about 4.4 ASCII characters or 2 other UTF-8 bytes a token"
    TOKENS_PER_MESSAGE = 4  # role markers and separators of a chat template
    TOKENS_PER_PROMPT = 3  # beginning of text and the assistant's turn

    def __init__(self, description: str) -> None:
        self.description = description

    def count(self, text: str) -> int:
        # An ASCII text's bytes are its characters (isascii is a flag CPython keeps: no pass over it).
        if text.isascii():
            return math.ceil(len(text) / self.BYTES_PER_TOKEN)
        ascii_chars = sum(1 for character in text if character.isascii())
        other_bytes = len(text.encode("utf-8", "surrogatepass")) - ascii_chars
        return math.ceil(ascii_chars / self.BYTES_PER_TOKEN + other_bytes / self.OTHER_BYTES_PER_TOKEN)

    def truncate(self, text: str, max_tokens: int) -> tuple[str, bool]:
        if max_tokens < 0:
            raise ValueError(f"max_tokens must be at least 0 (got {max_tokens})")
        if self.count(text) <= max_tokens:
            return text, False
        if text.isascii():
            return text[:int(max_tokens * self.BYTES_PER_TOKEN)], True
        used, cut = 0.0, 0  # walk the characters, each costing its share of a token
        for position, character in enumerate(text):
            used += (1 / self.BYTES_PER_TOKEN if character.isascii()
                     else len(character.encode("utf-8", "surrogatepass")) / self.OTHER_BYTES_PER_TOKEN)
            if used > max_tokens:
                break
            cut = position + 1
        return text[:cut], True

    def count_prompt(self, prompt: Prompt) -> int:
        if isinstance(prompt, str):
            return self.TOKENS_PER_PROMPT + self.count(prompt)
        messages = prompt
        return self.TOKENS_PER_PROMPT + sum(self.TOKENS_PER_MESSAGE + self.count(str(m.get("content", "")))
                                            for m in messages)
