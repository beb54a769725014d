"""Dense encoders from presets (:mod:`.presets`): one or two BERT-style towers, on ONNX Runtime or torch.

:func:`load_encoder` gives an object with the interface of :class:`~winnow.index.embedder.Embedder`
(``embed``, ``embed_queries``, ``embed_passages``, ``identity``, ``dimensions``, ``name``):

* ``minilm`` is the packaged int8 ONNX model, verified by sha256, no hub needed (unchanged).
* Every other preset is fetched from the Hugging Face hub (cached there after the first time) or
  read from a local folder (``preset.with_models(folder)``), and run by ``runtime``: ``"onnx"``
  (ONNX Runtime on the CPU, from the ONNX file the repository ships, ``preset.onnx_file``), or
  ``"torch"`` (transformers, on a GPU when there is one; the ``train`` extra). ``"auto"`` takes
  torch when a GPU is present or the repository ships no ONNX file, ONNX Runtime otherwise.

Offline, a preset that is not cached fails with one line naming the preset and the hub id.
Texts are tokenised with the model's own ``tokenizer.json`` (or its ``vocab.txt`` as a BERT
word-piece tokenizer, for older repositories), cut to ``max_tokens`` pieces, sorted by length and
run in batches padded to their longest member, as :class:`~winnow.index.embedder.Embedder` does.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

import numpy as np

from ..cores import available_cores
from ..errors import ModelError
from ..extras import import_extra
from ..records import Passage
from .embedder import BATCH_SIZE, Embedder, import_runtime, load_embedder
from .presets import DEFAULT_PRESET, EncoderPreset, get_preset, passage_input

if TYPE_CHECKING:
    import tokenizers

Runtime = Literal["auto", "onnx", "torch"]
RUNTIMES = ("auto", "onnx", "torch")
TORCH_FEATURE = "running a hub encoder with torch (--encoder …, runtime torch)"


class DenseEncoder(Protocol):
    """What dense indexing and search need from an encoder (the MiniLM Embedder has it too)."""

    name: str
    dimensions: int
    threads: int

    @property
    def identity(self) -> dict[str, Any]: ...

    def embed(self, texts: Sequence[str], *, progress: Callable[[int], None] | None = None) -> np.ndarray: ...

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_passages(self, passages: Sequence[Passage], *,
                       progress: Callable[[int], None] | None = None) -> np.ndarray: ...


def load_encoder(preset: str | EncoderPreset = DEFAULT_PRESET, *, runtime: Runtime = "auto",
                 batch_size: int = BATCH_SIZE, threads: int | None = None) -> DenseEncoder:
    """The encoder of ``preset`` (a name or an :class:`EncoderPreset`); see the module notes."""
    if isinstance(preset, str):
        preset = get_preset(preset)
    if runtime not in RUNTIMES:
        raise ModelError(f"unknown encoder runtime {runtime!r}", f"choose one of {', '.join(RUNTIMES)}")
    if preset.name == DEFAULT_PRESET and preset == get_preset(DEFAULT_PRESET) and runtime != "torch":
        return load_embedder(batch_size=batch_size, threads=threads)
    return TransformerEncoder.load(preset, runtime=runtime, batch_size=batch_size, threads=threads)


def encoder_for_identity(identity: dict[str, Any], *, runtime: Runtime = "auto",
                         threads: int | None = None) -> DenseEncoder:
    """The encoder that made the vectors described by ``identity`` (an index's ``dense/model.json``).

    Indexes written before presets existed have no ``preset``: they are MiniLM's.
    """
    name = identity.get("preset", DEFAULT_PRESET)
    preset = get_preset(name)
    if name != DEFAULT_PRESET:
        # The recorded models, sizes and limits win: they are what made the vectors (a local copy
        # or a fine-tune of the preset's weights included).
        preset = replace(preset.with_models(identity.get("query_model", preset.query_model),
                                            identity.get("passage_model", preset.passage_model)),
                         dimensions=int(identity.get("dimensions", preset.dimensions)),
                         max_tokens=int(identity.get("max_tokens", preset.max_tokens)))
    return load_encoder(preset, runtime=runtime, threads=threads)


# --- fetching --------------------------------------------------------------------------------------

def model_folder(preset: EncoderPreset, model: str, patterns: list[str]) -> tuple[Path, str]:
    """A local folder holding ``model``'s files matching ``patterns``, and its revision.

    A local folder is used as it is (its revision: the sha256 of its file names and sizes is too
    weak, so of its weights' bytes, see :func:`local_revision`); a hub id is fetched into (or found
    in) the hub cache, whose snapshot folder is named by the commit.
    """
    local = Path(model).expanduser()
    if local.is_dir():
        return local, local_revision(local)
    from ..models.hub import fetch

    folder = fetch(f"the encoder preset {preset.name!r} ({model})", model, patterns=patterns,
                   alternative="use --encoder minilm (packaged, works offline), or in Python "
                               "a local copy: preset.with_models(FOLDER)")
    return folder, folder.name


def local_revision(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.suffix in (".safetensors", ".bin", ".onnx", ".json", ".txt"):
            digest.update(path.relative_to(folder).as_posix().encode("utf-8"))
            with path.open("rb") as handle:
                digest.update(hashlib.file_digest(handle, "sha256").digest())
    return "local-sha256:" + digest.hexdigest()


def load_tokenizer(folder: Path, max_tokens: int) -> tokenizers.Tokenizer:
    """The model's ``tokenizer.json``, or a BERT word-piece tokenizer over its ``vocab.txt``."""
    _, library = import_runtime()  # not named tokenizers: that name is the module's type below
    if (folder / "tokenizer.json").is_file():
        tokenizer = cast("tokenizers.Tokenizer", library.Tokenizer.from_file(str(folder / "tokenizer.json")))
    elif (folder / "vocab.txt").is_file():
        lowercase = True
        config = folder / "tokenizer_config.json"
        if config.is_file():
            lowercase = bool(json.loads(config.read_text(encoding="utf-8")).get("do_lower_case", True))
        from tokenizers.implementations.bert_wordpiece import BertWordPieceTokenizer

        tokenizer = BertWordPieceTokenizer(str(folder / "vocab.txt"), lowercase=lowercase)._tokenizer
    else:
        raise ModelError(f"{folder} has neither tokenizer.json nor vocab.txt", "pass the folder of a BERT-style model")
    tokenizer.enable_truncation(max_length=max_tokens)  # longest_first for pairs: the text side gives way
    tokenizer.no_padding()
    return tokenizer


# --- running one tower -----------------------------------------------------------------------------

class Tower:
    """One encoder (tokenizer and network): token ids in, one pooled vector per text out."""

    def __init__(self, tokenizer: tokenizers.Tokenizer, preset: EncoderPreset, revision: str,
                 tokenizer_sha256: str) -> None:
        self.tokenizer = tokenizer
        self.preset = preset
        self.revision = revision
        self.tokenizer_sha256 = tokenizer_sha256

    def encode(self, inputs: Sequence[str | tuple[str, str]], batch_size: int,
               progress: Callable[[int], None] | None) -> np.ndarray:
        vectors = np.empty((len(inputs), self.preset.dimensions), dtype=np.float32)
        if not inputs:
            return vectors
        encodings = self.tokenizer.encode_batch(list(inputs))
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
        order = np.argsort(-lengths, kind="stable")
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            width = int(lengths[rows].max())
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            types = np.zeros_like(ids)
            for row, i in enumerate(rows):
                encoding = encodings[i]
                n = len(encoding.ids)
                ids[row, :n], mask[row, :n], types[row, :n] = encoding.ids, 1, encoding.type_ids
            pooled = self.pooled(ids, mask, types)
            if self.preset.normalise:
                pooled = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            vectors[rows] = pooled
            if progress is not None:
                progress(len(rows))
        return vectors

    def pooled(self, ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
        raise NotImplementedError


def pool(hidden: np.ndarray, mask: np.ndarray, pooling: str) -> np.ndarray:
    """[CLS] (the first position) or the mean over real tokens, as float32."""
    if pooling == "cls":
        return np.asarray(hidden[:, 0], dtype=np.float32)
    weights = mask[:, :, None].astype(np.float32)
    mean: np.ndarray = ((hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)).astype(np.float32)
    return mean


class OnnxTower(Tower):
    def __init__(self, session: Any, *args: Any) -> None:
        super().__init__(*args)
        self.session = session
        self.inputs = {node.name for node in session.get_inputs()}
        self.output = session.get_outputs()[0].name

    def pooled(self, ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        [hidden] = self.session.run([self.output], {name: value for name, value in feed.items() if name in self.inputs})
        return pool(hidden, mask, self.preset.pooling)


class TorchTower(Tower):
    def __init__(self, model: Any, device: str, *args: Any) -> None:
        super().__init__(*args)
        self.model = model
        self.device = device

    def pooled(self, ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
        import torch

        with torch.inference_mode():
            tensors = {name: torch.from_numpy(value).to(self.device)
                       for name, value in (("input_ids", ids), ("attention_mask", mask), ("token_type_ids", types))}
            output = self.model(**tensors)
            hidden = getattr(output, "last_hidden_state", None)
            if hidden is None:
                # DPR's encoder classes return only pooler_output, which (projection_dim 0, as in
                # every DPR checkpoint) is the [CLS] vector itself.
                pooled: np.ndarray = output.pooler_output.float().cpu().numpy()
            elif self.preset.pooling == "cls":
                pooled = hidden[:, 0].float().cpu().numpy()
            else:
                weights = tensors["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = ((hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)).float().cpu().numpy()
            return pooled


def file_sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def tokenizer_file(folder: Path) -> Path:
    return folder / ("tokenizer.json" if (folder / "tokenizer.json").is_file() else "vocab.txt")


def load_tower(preset: EncoderPreset, model: str, runtime: str, threads: int) -> Tower:
    if runtime == "onnx":
        onnx_file = preset.onnx_file or "model.onnx"
        folder, revision = model_folder(preset, model, ["*.json", "vocab.txt", onnx_file])
        if not (folder / onnx_file).is_file():
            raise ModelError(f"the encoder preset {preset.name!r}: {model} has no ONNX file {onnx_file}",
                             "run it with torch (runtime 'torch', the 'train' extra)")
        onnxruntime, _ = import_runtime()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        session = onnxruntime.InferenceSession(str(folder / onnx_file), options, providers=["CPUExecutionProvider"])
        return OnnxTower(session, load_tokenizer(folder, preset.max_tokens), preset, revision,
                         file_sha256(tokenizer_file(folder)))
    torch = import_extra("torch", "train", TORCH_FEATURE)
    transformers = import_extra("transformers", "train", TORCH_FEATURE)
    folder, revision = model_folder(preset, model, ["*.json", "vocab.txt", "*.safetensors"])
    if not any(folder.glob("*.safetensors")):  # older repositories ship only pytorch_model.bin
        folder, revision = model_folder(preset, model, ["*.json", "vocab.txt", "pytorch_model.bin"])
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        torch.set_num_threads(threads)
    network = transformers.AutoModel.from_pretrained(str(folder)).eval().to(device)
    return TorchTower(network, device, load_tokenizer(folder, preset.max_tokens), preset, revision,
                      file_sha256(tokenizer_file(folder)))


def choose_runtime(preset: EncoderPreset, runtime: Runtime) -> str:
    if runtime != "auto":
        return runtime
    has_torch = all(_installed(module) for module in ("torch", "transformers"))
    if has_torch and (preset.onnx_file is None or _cuda()):
        return "torch"
    if preset.onnx_file is not None:
        return "onnx"
    import_extra("torch", "train", f"the encoder preset {preset.name!r} (its repository ships no ONNX file)")
    return "torch"


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


class TransformerEncoder:
    """A preset's query and passage towers (the same tower for a one-tower preset).

    The passage tower of a two-tower preset is loaded on first use, so opening an index for search
    loads only the query encoder.
    """

    def __init__(self, preset: EncoderPreset, runtime: str, query_tower: Tower, *, batch_size: int,
                 threads: int, passage_tower: Tower | None = None) -> None:
        self.preset = preset
        self.runtime = runtime
        self.name = preset.name
        self.dimensions = preset.dimensions
        self.batch_size = batch_size
        self.threads = threads
        self._query = query_tower
        self._passage = passage_tower if passage_tower is not None else (None if preset.two_tower else query_tower)

    @classmethod
    def load(cls, preset: EncoderPreset, *, runtime: Runtime = "auto", batch_size: int = BATCH_SIZE,
             threads: int | None = None) -> TransformerEncoder:
        chosen = choose_runtime(preset, runtime)
        threads = threads or available_cores()
        return cls(preset, chosen, load_tower(preset, preset.query_model, chosen, threads),
                   batch_size=batch_size, threads=threads)

    @property
    def passage_tower(self) -> Tower:
        if self._passage is None:
            self._passage = load_tower(self.preset, self.preset.passage_model, self.runtime, self.threads)
        return self._passage

    @property
    def identity(self) -> dict[str, Any]:
        """What made the vectors. ``sha256`` covers the weights of both towers (hub commits or local
        file hashes) and how they are applied, so ONNX and torch runs of one checkpoint match."""
        preset = self.preset
        passage_revision = self._query.revision if not preset.two_tower else (
            self._passage.revision if self._passage is not None else None)
        described = {
            "model": preset.name, "preset": preset.name, "query_model": preset.query_model,
            "passage_model": preset.passage_model, "query_revision": self._query.revision,
            "pooling": preset.pooling, "normalised": preset.normalise, "dimensions": preset.dimensions,
            "max_tokens": preset.max_tokens, "query_prefix": preset.query_prefix,
            "passage_prefix": preset.passage_prefix, "passage_format": preset.passage_format,
            "runtime": self.runtime, "package": f"{preset.query_model}@{self._query.revision}",
        }
        weights = {key: described[key] for key in ("preset", "query_model", "passage_model", "query_revision",
                                                    "pooling", "normalised", "max_tokens", "query_prefix",
                                                    "passage_prefix", "passage_format")}
        described["sha256"] = hashlib.sha256(json.dumps(weights, sort_keys=True).encode("utf-8")).hexdigest()
        described["tokenizer_sha256"] = self._query.tokenizer_sha256
        if passage_revision is not None:
            described["passage_revision"] = passage_revision
        return described

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._query.encode([self.preset.query_prefix + text for text in texts], self.batch_size, None)

    def embed_passages(self, passages: Sequence[Passage], *,
                       progress: Callable[[int], None] | None = None) -> np.ndarray:
        inputs = [passage_input(self.preset, p.title, p.text) for p in passages]
        return self.passage_tower.encode(inputs, self.batch_size, progress)

    def embed(self, texts: Sequence[str], *, progress: Callable[[int], None] | None = None) -> np.ndarray:
        """Texts through the query tower with the query prefix (the embedding reranker's use)."""
        return self._query.encode([self.preset.query_prefix + text for text in texts], self.batch_size, progress)


__all__ = ["DenseEncoder", "Embedder", "RUNTIMES", "TransformerEncoder", "encoder_for_identity", "load_encoder"]
