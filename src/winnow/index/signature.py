"""A keyed signature of an index (HMAC-SHA256 over its manifest), for a server that must not serve a forged one.

What the manifest alone protects against is accident: a truncated, flipped or missing file, a file
of another build, a hand edit of the manifest that forgot its own checksum. It does not protect
against someone who edits a file on purpose and then recomputes every checksum, the manifest's own
included: everything it checks is public. A signature does, for anyone without the key. With a key
in ``WINNOW_INDEX_KEY`` (the key itself) or ``WINNOW_INDEX_KEY_FILE`` (a file holding it), every
manifest Winnow writes is signed into ``manifest.sig`` beside it, and every open of a signed index
checks the signature; ``winnow sign INDEX`` signs an existing one, and ``winnow serve
--require-signature`` refuses an index whose signature is missing or wrong. The manifest lists each
file's sha256, so the signature covers every byte of the index; the record of files already hashed
(:mod:`.verified`) carries a MAC under the same key, so a forged record cannot stand in for hashing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path

from ..atomic import write_json
from ..errors import IndexLoadError, WinnowError

SIGNATURE = "manifest.sig"
KEY_VARIABLE = "WINNOW_INDEX_KEY"
KEY_FILE_VARIABLE = "WINNOW_INDEX_KEY_FILE"
ALGORITHM = "hmac-sha256"
#: Shorter keys are refused: an HMAC is only as strong as a key an attacker cannot guess.
MIN_KEY_BYTES = 16


def index_key() -> bytes | None:
    """The signing key from the environment, or None when none is set."""
    text = os.environ.get(KEY_VARIABLE, "")
    source = KEY_VARIABLE
    key_file = os.environ.get(KEY_FILE_VARIABLE, "")
    if key_file:
        if text:
            raise WinnowError(f"both {KEY_VARIABLE} and {KEY_FILE_VARIABLE} are set", "set one of them")
        try:
            text = Path(key_file).expanduser().read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise WinnowError(f"{KEY_FILE_VARIABLE}={key_file}: cannot read the key file ({exc.strerror})",
                              "give a readable file holding the key") from exc
        source = key_file
    if not text:
        return None
    key = text.encode("utf-8")
    if len(key) < MIN_KEY_BYTES:
        raise WinnowError(f"{source}: the index key is {len(key)} bytes; at least {MIN_KEY_BYTES} are needed",
                          "make one with `python -c 'import secrets; print(secrets.token_hex(32))'`")
    return key


def mac(key: bytes, data: bytes) -> str:
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def record_mac(key: bytes, record: dict[str, object]) -> str:
    """The MAC of a JSON record (the verified-files record), over its canonical form."""
    return mac(key, json.dumps(record, sort_keys=True, separators=(",", ":")).encode("utf-8"))


def sign_manifest(folder: Path, manifest_bytes: bytes, key: bytes) -> None:
    """Write ``manifest.sig`` for the manifest whose bytes are ``manifest_bytes`` (whole or not at all)."""
    write_json(folder / SIGNATURE, {"algorithm": ALGORITHM, "mac": mac(key, manifest_bytes)})


def check_signature(folder: Path, manifest_bytes: bytes, key: bytes, *, required: bool) -> None:
    """Refuse an index whose signature does not match ``manifest_bytes`` under ``key``, or, when
    ``required``, one that has no signature."""
    path = folder / SIGNATURE
    if not path.is_file():
        if required:
            raise IndexLoadError(f"{folder} is not signed ({SIGNATURE} is missing) and a signed index is required",
                                 f"sign it with `winnow sign {folder}` (with {KEY_VARIABLE} or {KEY_FILE_VARIABLE} "
                                 "set) once you trust its files, or rebuild it with the key set")
        return
    try:
        signature = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise IndexLoadError(f"{path} is unreadable: {exc}", f"sign the index again with `winnow sign {folder}`") \
            from exc
    if not isinstance(signature, dict) or signature.get("algorithm") != ALGORITHM \
            or not isinstance(signature.get("mac"), str):
        raise IndexLoadError(f"{path} is not a Winnow index signature ({ALGORITHM})",
                             f"sign the index again with `winnow sign {folder}`")
    if not hmac.compare_digest(signature["mac"], mac(key, manifest_bytes)):
        raise IndexLoadError(f"{folder}: the signature in {SIGNATURE} does not match the manifest under this key: "
                             "the index was changed by someone without the key, or signed with another key",
                             "rebuild the index from its source with the key set, or set the key it was signed "
                             "with")
