"""The GGUF model the suite runs: SmolLM2-135M-Instruct at Q8_0, derived from the registry's Q4_1.

The registry's ``smollm2-135m`` ships as Q4_1, whose CPU kernels are slow for so small a model:
on one core llama.cpp prefilled 108 tokens/s at Q4_1 and 190 at Q8_0, and decoded 70 against 108
(2026-11-29, 186-token prompts). Model time is most of the suite's, so the tests run the same
weights requantised to Q8_0: every Q4_1 block is dequantised and quantised again to 8 bits (gguf's
own quantisers), which keeps its values to within 1/254 of each block's largest, and everything else
in the file (tokenizer, chat template, the Q8_0 embeddings) is copied unchanged. Its answers match
the Q4_1 model's to about 0.1 in log-probability; what the tests check is Winnow, not the model.

The file is named ``smollm2-135m.gguf``, so a path to it names runs as the registry name does.
Tests that check the registry itself (resolution, checksums, the GGUF's tokenizer, training) keep
``smollm2-135m`` by name. ``WINNOW_TEST_MODEL`` set before the run points the suite at another GGUF
(``WINNOW_TEST_MODEL=smollm2-135m``: the registry's own file).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from importlib.metadata import version
from pathlib import Path

#: The environment variable that carries the test model from the session to its workers and processes.
TEST_MODEL_VARIABLE = "WINNOW_TEST_MODEL"
#: The registry model the test model is derived from.
SOURCE_MODEL = "smollm2-135m"
#: Folders this process derived the test model into for this run only (removed when it ends).
_RUN_FOLDERS: list[Path] = []


def suite_model() -> str:
    """The model the tests run: a path to the derived GGUF (or what ``WINNOW_TEST_MODEL`` names)."""
    return os.environ.get(TEST_MODEL_VARIABLE) or SOURCE_MODEL


def prepare_test_model(root: Path | None) -> str:
    """Derive the test model once into ``root`` (kept between runs; None: a folder of this run's)
    unless ``WINNOW_TEST_MODEL`` already names one; set the variable and return it."""
    if os.environ.get(TEST_MODEL_VARIABLE):
        return os.environ[TEST_MODEL_VARIABLE]
    if importlib.util.find_spec("gguf") is None:  # the [tokenizer] extra's: without it, the shipped file
        return SOURCE_MODEL
    from winnow.models.registry import REGISTRY

    spec = REGISTRY[SOURCE_MODEL]
    source = spec.parts[0].locate()
    if source is None:  # the registry's tests say how to install it
        return SOURCE_MODEL
    digest = hashlib.sha256(Path(__file__).read_bytes() + version("gguf").encode() + spec.sha256.encode())
    if root is None:
        root = Path(tempfile.mkdtemp(prefix="winnow-test-model-"))
        _RUN_FOLDERS.append(root)
    folder = root / f"test-model-{digest.hexdigest()[:12]}"
    target = folder / f"{SOURCE_MODEL}.gguf"
    if not target.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        requantise_to_q8_0(source, target)
    os.environ[TEST_MODEL_VARIABLE] = str(target)
    return str(target)


def discard_run_copies() -> None:
    """Remove the copies :func:`prepare_test_model` made for this run only (no folder to keep them)."""
    import shutil

    for folder in _RUN_FOLDERS:
        shutil.rmtree(folder, ignore_errors=True)


def requantise_to_q8_0(source: Path, target: Path) -> None:
    """Write ``source`` with its Q4_1 tensors requantised to Q8_0, into a temporary file renamed onto
    ``target`` (two sessions deriving at once each write a whole file)."""
    import gguf
    from gguf.quants import dequantize, quantize

    reader = gguf.GGUFReader(source)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    writer = gguf.GGUFWriter(temporary, reader.fields["general.architecture"].contents())
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":  # the writer sets these itself
            continue
        kind = field.types[0]
        writer.add_key_value(key, field.contents(), kind,
                             sub_type=field.types[1] if kind == gguf.GGUFValueType.ARRAY else None)
    for tensor in reader.tensors:
        if tensor.tensor_type == gguf.GGMLQuantizationType.Q4_1:
            shape = [int(n) for n in reversed(tensor.shape)]
            weights = dequantize(tensor.data, tensor.tensor_type).reshape(shape)
            writer.add_tensor(tensor.name, quantize(weights, gguf.GGMLQuantizationType.Q8_0),
                              raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(tensor.name, tensor.data, raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(temporary, target)
