"""The trained rerankers the papers compare against: cross-encoders and monoT5, loaded with transformers.

RankRAG Table 6 ("Ranking performance with different ranking models") reranks Dragon's top 100
with models "fine-tuned on the full MS MARCO passage ranking dataset" (RankBERT, monoT5 3B) and
"a strong off-the-shelf reranker model BGE-ranker" (BGE-Reranker-v2-m3), and measures Recall@5/10/20
(§5.5). GAR-meets-RAG (RRR) Tables 1-2 (BEIR nDCG@10, Recall@100) and Table 3 (TREC-DL20 nDCG@1/5/10)
list monoT5 (220M: ``castorini/monot5-base-msmarco``; 3B) and monoBERT among the baselines. Two
kinds of model cover them:

* ``cross-encoder``: a sequence-classification model over the pair (query, passage) in one input
  (``[CLS] query [SEP] passage [SEP]``), the passage truncated first past ``max_length`` tokens.
  The score is the relevance logit: the one output of a single-label model (the MS MARCO MiniLM
  cross-encoders, ``cross-encoder/ms-marco-MiniLM-L-6-v2``; ``BAAI/bge-reranker-base``,
  ``BAAI/bge-reranker-v2-m3``), or logit(relevant) - logit(not relevant) for a two-label model
  (monoBERT's head), whose sigmoid is the softmax probability of the relevant label either way.
* ``monot5``: a T5 sequence-to-sequence model given "Query: {q} Document: {d} Relevant:" (Nogueira
  et al., 2020, "Document Ranking with a Pretrained Sequence-to-Sequence Model"); the score is the
  softmax over the logits of the tokens "true" and "false" at the first decoder step, P("true").
  A document too long for ``max_length`` is cut so that the closing "Relevant:" stays in.

A model is a local folder (``config.json``, weights, tokenizer), loaded as it is, or a hub id
(``owner/name``), loaded from the Hugging Face hub by transformers for users online. Offline, a hub
id that is not already in the huggingface_hub cache fails at once with one line naming the model and
how to get it onto the machine. Loaded models are kept per process (:func:`load_pair_scorer`), so
the service's per-request methods and the adapters share one copy.
"""

from __future__ import annotations

import math
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Sequence

from ..errors import ModelError

PairScorerKind = Literal["cross-encoder", "monot5"]

#: The model each kind loads when none is named: the small public checkpoints of the papers' baselines.
DEFAULT_RERANKER_MODELS: dict[str, str] = {
    "cross-encoder": "cross-encoder/ms-marco-MiniLM-L-6-v2",
    "monot5": "castorini/monot5-base-msmarco",  # RRR Table 3's monoT5 (220M)
}

#: Public checkpoints known to fit each kind (any model of the same architecture does).
KNOWN_RERANKER_MODELS: dict[str, tuple[str, ...]] = {
    "cross-encoder": ("cross-encoder/ms-marco-MiniLM-L-6-v2", "cross-encoder/ms-marco-MiniLM-L-12-v2",
                      "BAAI/bge-reranker-base", "BAAI/bge-reranker-large", "BAAI/bge-reranker-v2-m3"),
    "monot5": ("castorini/monot5-base-msmarco", "castorini/monot5-3b-msmarco"),
}

MONOT5_TEMPLATE = "Query: {query} Document: {document} Relevant:"
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
DEFAULT_MAX_LENGTH = 512  # tokens per pair: the MS MARCO cross-encoders' and monoT5's training length


@dataclass(frozen=True)
class PairScores:
    """One query's scores, one per passage in order, and how many passages were cut to fit."""

    scores: list[float]
    truncated: int = 0


def relevance_of(kind: str, score: float) -> float:
    """A pair score on a 0-1 scale: the sigmoid of a cross-encoder's logit; monoT5's P("true") as it is."""
    if kind == "monot5":
        return score
    return 1.0 / (1.0 + math.exp(-score)) if score > -700 else 0.0


def _offline_hint(kind: str, name: str) -> str:
    # No method's setting by name here (a new method's would be missed): settings that name a model
    # folder are marked by type (winnow.settings.ModelPath) and listed by `winnow methods`.
    return (f"on a machine online, `hf download {name} --local-dir DIR` (huggingface_hub) and give the folder: "
            f"--model DIR (winnow rerank --method {kind}), or DIR as the method's reranker model setting "
            f"(`winnow methods` lists each method's settings)")


def model_folder(name: str, kind: str) -> Path:
    """The folder ``name`` names: a local folder as it is; a hub id downloaded into (or, offline,
    found in) the huggingface_hub cache. Downloading here rather than in ``from_pretrained`` keeps an
    offline machine from transformers' retries (its adapter lookup asks the hub even when told to use
    local files only) and fetches one copy of the weights (safetensors where the repo has them)."""
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelError(f"{kind} model folder {path} has no config.json",
                             "give a Hugging Face model folder (config.json, weights, tokenizer files)")
        return path
    if not HUB_ID.match(name):
        raise ModelError(f"{kind} model {name!r} is neither a folder nor a hub id (owner/name)",
                         f"give a model folder, or a hub id: {', '.join(KNOWN_RERANKER_MODELS[kind])}")
    from .hub import fetch, hub_endpoint, hub_library, offline_reason

    hint = _offline_hint(kind, name)
    hub = hub_library(f"the {kind} model {name!r}", alternative=hint)
    patterns = ["*.json", "*.model", "*.txt", "*.safetensors", "*.bin"]  # offline: what the cache holds
    if offline_reason(hub, hub_endpoint()) is None:
        try:  # one copy of the weights: safetensors where the repo has them
            files = hub.list_repo_files(name, endpoint=hub_endpoint())
        except Exception:  # noqa: BLE001 - fetch() below names whatever is wrong with the id, in one line
            files = []
        weights = [f for f in files if f.endswith(".safetensors")] or [f for f in files if f.endswith(".bin")]
        patterns = ["*.json", "*.model", "*.txt", *weights]
    return fetch(f"the {kind} model {name!r}", name, patterns=patterns, alternative=hint)


def _pretrained(loader: Any, folder: Path, kind: str, what: str) -> Any:
    """``loader.from_pretrained(folder)``, a failure named as the model's."""
    try:
        return loader.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelError(f"{kind} model {folder}: the {what} cannot be loaded: {exc}".split("\n")[0],
                         "give a folder saved by save_pretrained (config.json, weights, tokenizer files)") from exc


class _TransformersScorer:
    """What both kinds share: the model and tokenizer on the first GPU (else the CPU), a lock (one
    forward pass at a time: the service's request threads and a method may share one copy), batches."""

    kind: PairScorerKind

    def __init__(self, name: str, folder: Path, model: Any, tokenizer: Any, *, max_length: int,
                 batch_size: int | None) -> None:
        import torch

        from .loading import folder_sha256

        self.name = name
        self._torch = torch
        self._device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = model.to(self._device).eval()
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.batch_size = batch_size or (64 if self._device == "cuda" else 16)
        self._lock = threading.Lock()
        self.identity = {"model": name, "sha256": folder_sha256(folder)}

    def score(self, query: str, passages: Sequence[str]) -> PairScores:
        scores: list[float] = []
        truncated = 0
        with self._lock, self._torch.inference_mode():
            for start in range(0, len(passages), self.batch_size):
                chunk, cut = self._batch(query, passages[start:start + self.batch_size])
                scores += chunk
                truncated += cut
        return PairScores(scores, truncated)

    def _batch(self, query: str, passages: Sequence[str]) -> tuple[list[float], int]:  # pragma: no cover
        raise NotImplementedError


class CrossEncoderScorer(_TransformersScorer):
    """A sequence-classification cross-encoder (see the module notes for its score)."""

    kind: PairScorerKind = "cross-encoder"
    description = "relevance logit of a cross-encoder over (query, passage)"

    def __init__(self, name: str, *, max_length: int = DEFAULT_MAX_LENGTH, batch_size: int | None = None) -> None:
        import transformers

        folder = model_folder(name, self.kind)
        model = _pretrained(transformers.AutoModelForSequenceClassification, folder, self.kind, "model")
        tokenizer = _pretrained(transformers.AutoTokenizer, folder, self.kind, "tokenizer")
        labels = int(getattr(model.config, "num_labels", 1))
        if labels not in (1, 2):
            raise ModelError(f"cross-encoder model {name!r} has {labels} output labels",
                             "a reranker has one (a relevance logit) or two (not relevant, relevant)")
        # A model trained on shorter inputs has no position past its own: never feed it more.
        positions = getattr(model.config, "max_position_embeddings", None)
        if isinstance(positions, int) and 0 < positions < max_length:
            max_length = positions
        super().__init__(name, folder, model, tokenizer, max_length=max_length, batch_size=batch_size)

    def _batch(self, query: str, passages: Sequence[str]) -> tuple[list[float], int]:
        queries = [query] * len(passages)
        full = self.tokenizer(queries, list(passages), truncation=False, verbose=False)["input_ids"]
        cut = sum(len(ids) > self.max_length for ids in full)
        encoded = self.tokenizer(queries, list(passages), truncation="longest_first", max_length=self.max_length,
                                 padding=True, return_tensors="pt").to(self._device)
        logits = self.model(**encoded).logits.float()
        scores = logits[:, 0] if logits.shape[1] == 1 else logits[:, 1] - logits[:, 0]
        return scores.tolist(), cut


class MonoT5Scorer(_TransformersScorer):
    """monoT5: P("true") against "false" at the first decoder step (see the module notes)."""

    kind: PairScorerKind = "monot5"
    description = 'P("true") over {"true", "false"} at monoT5\'s first decoder step'

    def __init__(self, name: str, *, max_length: int = DEFAULT_MAX_LENGTH, batch_size: int | None = None) -> None:
        import transformers

        folder = model_folder(name, self.kind)
        model = _pretrained(transformers.AutoModelForSeq2SeqLM, folder, self.kind, "model")
        tokenizer = _pretrained(transformers.AutoTokenizer, folder, self.kind, "tokenizer")
        if not getattr(model.config, "is_encoder_decoder", False):
            raise ModelError(f"monot5 model {name!r} is not an encoder-decoder (T5) model",
                             "give a monoT5 checkpoint such as castorini/monot5-base-msmarco")
        self.true_id, self.false_id = (_word_token(tokenizer, word, name) for word in ("true", "false"))
        super().__init__(name, folder, model, tokenizer, max_length=max_length, batch_size=batch_size)
        start = model.config.decoder_start_token_id
        self._start = int(start if start is not None else model.config.pad_token_id)

    def prompt(self, query: str, passage: str) -> tuple[str, bool]:
        """The monoT5 input for one pair, the passage cut (at a token boundary) so that the whole
        fits ``max_length`` with "Relevant:" kept; and whether it was cut."""
        text = MONOT5_TEMPLATE.format(query=query, document=passage)
        if len(self.tokenizer(text, verbose=False)["input_ids"]) <= self.max_length:
            return text, False
        frame = len(self.tokenizer(MONOT5_TEMPLATE.format(query=query, document=""), verbose=False)["input_ids"])
        budget = max(0, self.max_length - frame)
        offsets = self.tokenizer(passage, add_special_tokens=False, return_offsets_mapping=True,
                                 verbose=False)["offset_mapping"]
        end = offsets[budget - 1][1] if budget and budget <= len(offsets) else 0
        return MONOT5_TEMPLATE.format(query=query, document=passage[:end].rstrip()), True

    def _batch(self, query: str, passages: Sequence[str]) -> tuple[list[float], int]:
        prompts = [self.prompt(query, passage) for passage in passages]
        encoded = self.tokenizer([text for text, _ in prompts], truncation=True, max_length=self.max_length,
                                 padding=True, return_tensors="pt").to(self._device)
        start = self._torch.full((len(prompts), 1), self._start, dtype=self._torch.long, device=self._device)
        logits = self.model(**encoded, decoder_input_ids=start).logits[:, 0, :].float()
        pair = logits[:, [self.true_id, self.false_id]]
        return self._torch.softmax(pair, dim=-1)[:, 0].tolist(), sum(cut for _, cut in prompts)


def _word_token(tokenizer: Any, word: str, name: str) -> int:
    """The one token that spells ``word`` as monoT5 emits it: SentencePiece's "▁true", else "true"."""
    vocab = tokenizer.get_vocab()
    for spelling in (f"\u2581{word}", word):
        if spelling in vocab:
            return int(vocab[spelling])
    ids = tokenizer(word, add_special_tokens=False)["input_ids"]
    if len(ids) == 1:
        return int(ids[0])
    raise ModelError(f"monot5 model {name!r}: {word!r} is not one token of its vocabulary",
                     "monoT5 answers with the single tokens 'true' and 'false'; give a monoT5 checkpoint")


PairScorer = CrossEncoderScorer | MonoT5Scorer

_LOADED: dict[tuple[str, str, int], PairScorer] = {}
_LOADING = threading.Lock()


def load_pair_scorer(kind: str, name: str = "", *, max_length: int = DEFAULT_MAX_LENGTH) -> PairScorer:
    """The ``kind`` reranker ``name`` (a folder or hub id; "" for the kind's default), loaded once
    per process and shared. Needs the ``rerankers`` extra (torch and transformers)."""
    from ..extras import require

    if kind not in DEFAULT_RERANKER_MODELS:
        raise ModelError(f"unknown reranker model kind {kind!r}",
                         f"choose one of: {', '.join(DEFAULT_RERANKER_MODELS)}")
    require("rerankers", f"the {kind} reranker")
    name = name or DEFAULT_RERANKER_MODELS[kind]
    key = (kind, str(Path(name).expanduser().resolve()) if Path(name).expanduser().is_dir() else name, max_length)
    with _LOADING:
        if key not in _LOADED:
            import transformers

            # Winnow's own progress and errors speak; transformers' advice would interleave (its
            # datasets-silencing sibling, loading.quiet_libraries, costs seconds importing datasets).
            transformers.utils.logging.set_verbosity_error()
            transformers.utils.logging.disable_progress_bar()
            scorer_type = CrossEncoderScorer if kind == "cross-encoder" else MonoT5Scorer
            _LOADED[key] = scorer_type(name, max_length=max_length)
        return _LOADED[key]
