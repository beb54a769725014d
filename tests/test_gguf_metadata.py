"""One metadata string read from a GGUF file without parsing the rest (winnow.models.gguf_metadata):
the same values as the ``gguf`` package's full reader, in a fraction of the time it spends building
every element of the tokenizer's arrays."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from winnow.models.gguf_metadata import gguf_string

gguf = pytest.importorskip("gguf")


def write_gguf(path: Path) -> Path:
    """Metadata of every value kind, with a vocabulary-sized string array before the keys looked up."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_array("tokenizer.ggml.tokens", [f"tok{i}" * (i % 5 + 1) for i in range(20_000)])
    writer.add_array("tokenizer.ggml.scores", [float(i) for i in range(1_000)])
    writer.add_array("tokenizer.ggml.token_type", [1, 2, 3])
    writer.add_array("nested", [[1, 2], [3]])
    writer.add_uint32("some.count", 7)
    writer.add_float64("some.ratio", 0.5)
    writer.add_bool("some.flag", True)
    writer.add_string("winnow.framing", "plain")
    writer.add_string("unicode", "naïve — 東京")
    writer.add_tensor("w", np.zeros((2, 2), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_strings_read_as_the_full_reader_reads_them(tmp_path):
    path = write_gguf(tmp_path / "m.gguf")
    full = gguf.GGUFReader(path)
    for key in ("general.architecture", "winnow.framing", "unicode"):
        assert gguf_string(path, key) == str(full.get_field(key).contents())
    assert gguf_string(path, "winnow.framing") == "plain"


def test_a_missing_key_another_type_or_not_a_gguf_is_none(tmp_path):
    path = write_gguf(tmp_path / "m.gguf")
    assert gguf_string(path, "no.such.key") is None
    assert gguf_string(path, "some.count") is None  # a number, not a string
    assert gguf_string(path, "tokenizer.ggml.tokens") is None  # an array
    data = path.read_bytes()
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(data[:len(data) // 3])  # ends inside the vocabulary
    assert gguf_string(truncated, "winnow.framing") is None
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    assert gguf_string(empty, "winnow.framing") is None
    other = tmp_path / "model.bin"
    other.write_bytes(b"PK\x03\x04" + bytes(64))
    assert gguf_string(other, "winnow.framing") is None
    assert gguf_string(tmp_path / "absent.gguf", "winnow.framing") is None
