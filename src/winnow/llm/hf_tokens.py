"""Counting a model's tokens here, with its Hugging Face tokenizer, instead of asking its server.

Prompt fitting (:mod:`winnow.stages.fitting`) counts the tokens of every prompt that might not fit
the context, and of its passages. Against an OpenAI-compatible server that means a ``/tokenize``
round trip per count: about 20 for a RankGPT window of 20 passages, each a millisecond of client
CPU and one more request on the server. ``--tokenizer`` names the served model's tokenizer (a
Hugging Face model or tokenizer folder, a GGUF file or registry name, or a hub id when online) and
every count is made here: the chat template applied as chat completions apply it (the generation
prompt added, or a prefilled assistant turn continued), a plain prompt with the tokenizer's special
tokens, a passage without them. A GGUF's tokenizer is converted once and kept in the cache.

A tokenizer that is not the served model's would cut passages by the wrong counts, so where the
server has a ``/tokenize`` of its own the local one is checked against it once, at the first count,
on a chat prompt and on a passage; a mismatch is an error naming both counts
(:func:`check_against`).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ..atomic import staged_folder
from ..errors import ModelError
from ..extras import require
from ..lock import output_lock
from ..paths import cache_root
from .messages import Prompt
from .tokens import TokenIds

if TYPE_CHECKING:
    from ..models.resolve import ResolvedModel

#: Text the local tokenizer and the server's are both asked to count (accents, digits, markup a
#: chat template must not mistake for its own).
PROBE_TEXT = "Winnow checks the tokenizer: café 1,234.5 — <b>naïve</b> résumé\nnew line, tabs\tand 東京."
PROBE_PROMPT: list[dict[str, str]] = [
    {"role": "system", "content": "You rank passages."},
    {"role": "user", "content": PROBE_TEXT},
]


#: The files of a hub repository a tokenizer needs (not the weights).
TOKENIZER_FILES = ["tokenizer*", "special_tokens_map.json", "added_tokens.json", "chat_template*", "vocab*",
                   "merges.txt", "*.model", "config.json"]


class TokenizerIds:
    """:class:`~winnow.llm.tokens.TokenIds` over a transformers tokenizer (also the transformers
    backend's own counts)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def token_ids(self, prompt: Prompt) -> list[int]:
        """The prompt's tokens: chat template with the generation prompt, or continuing a prefilled
        assistant turn; plain text with the tokenizer's special tokens (its beginning of text)."""
        if isinstance(prompt, str):
            return list(self.tokenizer(prompt, add_special_tokens=True, verbose=False)["input_ids"])
        prefilled = bool(prompt) and prompt[-1]["role"] == "assistant"
        encoded = self.tokenizer.apply_chat_template(prompt, add_generation_prompt=not prefilled,
                                                     continue_final_message=prefilled, tokenize=True,
                                                     return_dict=True)
        return list(encoded["input_ids"])

    def encode(self, text: str) -> list[int]:
        # split_special_tokens: "<|im_start|>" in a passage is text, as the servers count it
        # (llama.cpp's /tokenize with parse_special off, vLLM's with add_special_tokens off).
        return list(self.tokenizer(text, add_special_tokens=False, split_special_tokens=True,
                                   verbose=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        text: str = self.tokenizer.decode(list(ids))
        return text

    def prompt_length(self, prompt: Prompt) -> int:
        return len(self.token_ids(prompt))


@lru_cache(maxsize=8)
def load_tokenizer(spec: str) -> tuple[TokenizerIds, str]:
    """(the tokenizer ``spec`` names, a description of it for the trace); :class:`ModelError` when
    none loads. ``spec``: a folder with ``tokenizer.json`` or ``tokenizer_config.json`` (a Hugging Face
    model folder has them), a ``.gguf`` file or a registry name (the GGUF's own tokenizer and chat
    template), else a hub id (``Qwen/Qwen2.5-7B-Instruct``; needs the network or the hub's cache).
    Loaded once per process (a GGUF's takes seconds to convert): every model of a run shares it."""
    require("tokenizer", f"--tokenizer {spec}")
    from ..models.hub import fetch
    from ..models.loading import quiet_libraries

    quiet_libraries()
    from transformers import AutoTokenizer

    path = Path(spec).expanduser()
    try:
        if path.is_dir():
            if not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
                raise ModelError(f"--tokenizer {spec}: the folder holds no tokenizer.json or tokenizer_config.json",
                                 "give the served model's folder, its .gguf file or its hub id")
            return TokenizerIds(AutoTokenizer.from_pretrained(path)), f"{path} (transformers)"
        gguf = _gguf_of(spec)
        if gguf is not None:
            folder = _converted(gguf, AutoTokenizer)
            return TokenizerIds(AutoTokenizer.from_pretrained(folder)), f"{gguf.path.name}'s own tokenizer"
        if spec.startswith((".", "~", "/")) or "\\" in spec or spec.count("/") > 1:
            found = "is neither a folder nor a .gguf file" if path.exists() else "no such folder or file"
            raise ModelError(f"--tokenizer {spec}: {found}",
                             "give the served model's folder, its .gguf file, a registry name or a hub id")
        # A hub id: its tokenizer files through models/hub.py (offline: one line, the cache alone).
        folder = fetch(f"the tokenizer {spec}", spec, patterns=TOKENIZER_FILES,
                       alternative="give a folder with tokenizer.json, or the served model's .gguf file")
        return TokenizerIds(AutoTokenizer.from_pretrained(folder)), f"{spec} (from the hub)"
    except (OSError, ValueError, KeyError) as exc:
        raise ModelError(f"--tokenizer {spec}: transformers could not load a tokenizer: {' '.join(str(exc).split())}",
                         "give a folder with tokenizer.json, a .gguf file, a registry name, or a hub id while "
                         "online (offline, the hub's cache must already hold it)") from exc


def _gguf_of(spec: str) -> ResolvedModel | None:
    """The GGUF file ``spec`` names (a path, or a registry name joined into the cache), or None."""
    from ..models.registry import REGISTRY
    from ..models.resolve import HUB_PREFIX, resolve_model

    if spec.lower().endswith(".gguf") or spec in REGISTRY or spec.startswith(HUB_PREFIX):
        return resolve_model(spec)
    return None


def _converted(gguf: ResolvedModel, auto_tokenizer: Any) -> Path:
    """A Hugging Face tokenizer folder made from the GGUF's tokenizer once per sha256, in the cache:
    converting it takes transformers about 15 s on a laptop core, loading the folder 0.3 s."""
    target = cache_root() / "tokenizers" / f"{gguf.name}-{gguf.sha256[:16]}"
    if (target / "tokenizer_config.json").is_file():
        return target
    with output_lock(target, wait=True):
        if not (target / "tokenizer_config.json").is_file():  # another process made it while we waited
            tokenizer = auto_tokenizer.from_pretrained(gguf.path.parent, gguf_file=gguf.path.name)
            with staged_folder(target) as temp:
                tokenizer.save_pretrained(temp)
    return target


def check_against(local: TokenIds, server: TokenIds, local_name: str, server_name: str) -> None:
    """Refuse a local tokenizer whose counts differ from the server's on :data:`PROBE_TEXT` (as a
    passage) or :data:`PROBE_PROMPT` (as a chat prompt): it is not the served model's."""
    passage = ("a passage", len(local.encode(PROBE_TEXT)), len(server.encode(PROBE_TEXT)))
    chat = ("a chat prompt", local.prompt_length(PROBE_PROMPT), server.prompt_length(PROBE_PROMPT))
    for what, ours, theirs in (passage, chat):
        if ours != theirs:
            raise ModelError(f"--tokenizer {local_name} counts {ours} tokens in {what} where {server_name} counts "
                             f"{theirs}: it is not the served model's tokenizer",
                             "give the tokenizer of the model the server runs, or leave --tokenizer out to count "
                             "with the server's /tokenize")
