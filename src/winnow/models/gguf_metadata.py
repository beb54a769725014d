"""One string from a GGUF file's metadata, read without parsing the rest.

A GGUF file opens with its metadata: key/value pairs, among them the tokenizer's vocabulary as arrays
of 50k-150k strings. The ``gguf`` package's reader builds a numpy view of every element of every
array, which takes 6 s for SmolLM2-135M's header and longer for bigger vocabularies: paid on every
model load, only to learn whether the file carries ``winnow.framing``. Here the pairs are walked with
the file memory-mapped, arrays skipped by their sizes (a string array by its strings' lengths), and
only the wanted value decoded: a few tens of milliseconds.

The layout (ggml's docs/gguf.md, versions 2 and 3): ``GGUF``, a uint32 version, uint64 tensor and
key/value counts, then each pair: a key (uint64 length + UTF-8 bytes), a uint32 value type and the
value; an array is a uint32 element type, a uint64 count and the elements. Little-endian only (a
big-endian file, rare, reads as having no such key: llama.cpp judges the file itself).
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

_STRING, _ARRAY = 8, 9
#: Bytes of each fixed-size value type (uint8 … float64, bool).
_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


class _NotGGUF(Exception):
    """The bytes are not a GGUF this reader follows (or the file ends early)."""


def _u32(view: mmap.mmap, at: int) -> int:
    if at + 4 > len(view):
        raise _NotGGUF
    return int(struct.unpack_from("<I", view, at)[0])


def _u64(view: mmap.mmap, at: int) -> int:
    if at + 8 > len(view):
        raise _NotGGUF
    return int(struct.unpack_from("<Q", view, at)[0])


def _skip_value(view: mmap.mmap, kind: int, at: int) -> int:
    """The offset just past a value of type ``kind`` starting at ``at``."""
    if kind in _FIXED:
        return at + _FIXED[kind]
    if kind == _STRING:
        return at + 8 + _u64(view, at)
    if kind != _ARRAY:
        raise _NotGGUF
    element, count = _u32(view, at), _u64(view, at + 4)
    at += 12
    if element in _FIXED:
        return at + count * _FIXED[element]
    for _ in range(count):  # strings, or nested arrays: each element says its own size
        at = _skip_value(view, element, at)
    return at


def gguf_string(path: Path, key: str) -> str | None:
    """The string value of ``key`` in the GGUF file's metadata; None when the file has no such key,
    holds another type under it, or is not a (little-endian, version 2 or 3) GGUF file."""
    wanted = key.encode("utf-8")
    try:
        with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
            if view[:4] != b"GGUF" or _u32(view, 4) not in (2, 3):
                return None
            pairs, at = _u64(view, 16), 24
            for _ in range(pairs):
                length = _u64(view, at)
                name = view[at + 8:at + 8 + length]
                at += 8 + length
                kind = _u32(view, at)
                at += 4
                if name == wanted:
                    if kind != _STRING:
                        return None
                    size = _u64(view, at)
                    return bytes(view[at + 8:at + 8 + size]).decode("utf-8", "replace")
                at = _skip_value(view, kind, at)
    except (OSError, ValueError, _NotGGUF):  # unreadable, empty (mmap of 0 bytes), truncated
        return None
    return None
