"""A keyed signature over the index manifest: a forged index (every checksum recomputed) is refused."""

from __future__ import annotations

import json

import pytest
from test_index import TOPICS, build, reseal_file
from typer.testing import CliRunner

from winnow.cli import app
from winnow.errors import IndexLoadError, WinnowError
from winnow.index import BM25Index
from winnow.index.manifest import file_sha256
from winnow.index.signature import SIGNATURE
from winnow.index.verified import VERIFIED, file_states

KEY = "0123456789abcdef0123456789abcdef"


def forge_vocabulary(folder):
    """Swap two vocabulary entries and recompute every checksum, the manifest's own included."""
    path = folder / "bm25" / "vocab.index.json"
    vocab = json.loads(path.read_text())
    first, second = sorted(vocab)[:2]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    path.write_text(json.dumps(vocab))
    reseal_file(folder, "bm25/vocab.index.json")


def test_without_a_key_a_forged_index_opens_which_is_what_the_manifest_cannot_see(tmp_path, monkeypatch):
    monkeypatch.delenv("WINNOW_INDEX_KEY", raising=False)
    build(tmp_path / "idx")
    forge_vocabulary(tmp_path / "idx")
    BM25Index.open(tmp_path / "idx")  # the documented limit: checksums protect against accidents only


def test_an_index_built_with_the_key_is_signed_and_a_forged_one_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("WINNOW_INDEX_KEY", KEY)
    build(tmp_path / "idx")
    assert (tmp_path / "idx" / SIGNATURE).is_file()
    assert len(BM25Index.open(tmp_path / "idx")) == len(TOPICS)
    forge_vocabulary(tmp_path / "idx")
    with pytest.raises(IndexLoadError, match="signature in manifest.sig does not match the manifest"):
        BM25Index.open(tmp_path / "idx")


def test_a_forged_record_of_verified_files_does_not_stand_in_for_hashing(tmp_path, monkeypatch):
    monkeypatch.setenv("WINNOW_INDEX_KEY", KEY)
    folder = tmp_path / "idx"
    build(folder)
    path = folder / "bm25" / "vocab.index.json"
    vocab = json.loads(path.read_text())
    first, second = sorted(vocab)[:2]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    path.write_text(json.dumps(vocab))  # the signed manifest untouched; a record forged to match the new file
    record = json.loads((folder / VERIFIED).read_text())
    record.pop("mac")
    record["files"] = file_states(folder, list(record["files"]))
    (folder / VERIFIED).write_text(json.dumps(record))
    with pytest.raises(IndexLoadError, match="vocab.index.json"):
        BM25Index.open(folder)


def test_winnow_sign_signs_an_existing_index_and_serve_requires_it(tmp_path, monkeypatch):
    monkeypatch.delenv("WINNOW_INDEX_KEY", raising=False)
    folder = tmp_path / "idx"
    build(folder)
    monkeypatch.setenv("WINNOW_INDEX_KEY", KEY)
    with pytest.raises(IndexLoadError, match="is not signed .* and a signed index is required"):
        CliRunner().invoke(app, ["serve", "--index", str(folder), "--require-signature", "--port", "0"],
                           catch_exceptions=False)
    signed = CliRunner().invoke(app, ["sign", str(folder)], catch_exceptions=False)
    assert signed.exit_code == 0 and "signed" in signed.output
    manifest_sum = file_sha256(folder / "manifest.json")
    assert json.loads((folder / VERIFIED).read_text())["manifest_sha256"] == manifest_sum
    forge_vocabulary(folder)
    with pytest.raises(IndexLoadError, match="does not match the manifest under this key"):
        CliRunner().invoke(app, ["serve", "--index", str(folder), "--require-signature", "--port", "0"],
                           catch_exceptions=False)


def test_a_short_key_and_a_missing_key_are_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setenv("WINNOW_INDEX_KEY", "short")
    with pytest.raises(WinnowError, match="the index key is 5 bytes; at least 16 are needed"):
        build(tmp_path / "idx")
    monkeypatch.delenv("WINNOW_INDEX_KEY")
    build(tmp_path / "idx2")
    with pytest.raises(WinnowError, match="winnow sign needs a key"):
        CliRunner().invoke(app, ["sign", str(tmp_path / "idx2")], catch_exceptions=False)
