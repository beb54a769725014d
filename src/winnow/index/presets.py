"""Encoder presets: the dense retrievers of the papers Winnow reproduces, each as the paper used it.

A preset names the model-hub ids of its query and passage encoders (the same id for a one-tower
model), how a text's token vectors become one vector (pooling), whether that vector is L2-normalised,
the prefixes each side gets, and the longest input in word pieces. Scores are always inner products:
for normalised presets that is the cosine; DPR, Contriever and Dragon+ were trained with an
unnormalised dot product, and normalising them would change their rankings.

* ``minilm``: all-MiniLM-L6-v2 (Reimers & Gurevych 2019), mean pooling, normalised, 256 pieces;
  Winnow's default, run from the packaged int8 ONNX file (:mod:`.embedder`), no hub needed.
* ``dpr``: DPR (Karpukhin et al. 2020, §3.1): separate BERT question and passage encoders, the
  [CLS] vector, dot product; passages are fed as the pair (title, text), as DPR's ``psgs_w100.tsv``
  indexes were built. The single-NQ checkpoints.
* ``contriever`` / ``contriever-msmarco``: Contriever (Izacard et al. 2022, §3 and App. A.1): one
  BERT encoder, mean pooling over tokens, dot product; the MS MARCO fine-tuned one is MAIN-RAG's
  retriever (Chang et al. 2024, §4.1).
* ``dragon-plus``: Dragon+ (Lin et al. 2023, §3): separate query and context encoders, [CLS], dot
  product; RankRAG's first stage (Yu et al. 2024, §5.1).
* ``e5``: E5-base-v2 (Wang et al. 2022, §4.1): mean pooling, normalised, "query: " and "passage: "
  prefixes, which the model was trained with and needs.
* ``bge``: BGE-base-en-v1.5 (Xiao et al. 2023, §3.3): [CLS], normalised, the retrieval instruction
  before queries only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from ..settings import SettingError

Pooling = Literal["mean", "cls"]
PassageFormat = Literal["title-newline-text", "title-text-pair", "title-space-text"]


@dataclass(frozen=True, slots=True)
class EncoderPreset:
    """How one dense retriever turns queries and passages into vectors (see the module notes)."""

    name: str
    query_model: str  # a model-hub id, or a local folder (tests, private models)
    passage_model: str  # equal to query_model for a one-tower model
    pooling: Pooling
    normalise: bool
    dimensions: int
    max_tokens: int
    query_prefix: str = ""
    passage_prefix: str = ""
    # How title and text become the passage input: DPR and Dragon+ encode (title, text) as a BERT
    # sentence pair ([CLS] title [SEP] text [SEP]); the others one string.
    passage_format: PassageFormat = "title-newline-text"
    # A path inside the hub repository where it ships an ONNX export of the encoder, if it does;
    # with one, the preset runs on ONNX Runtime without torch.
    onnx_file: str | None = None
    paper: str = ""

    @property
    def two_tower(self) -> bool:
        return self.query_model != self.passage_model

    def with_models(self, query_model: str, passage_model: str | None = None) -> EncoderPreset:
        """This preset's pooling, prefixes and limits over other weights (a local copy, a fine-tune)."""
        return replace(self, query_model=query_model, passage_model=passage_model or query_model)


BGE_INSTRUCTION = "Represent this sentence for searching relevant passages: "

PRESETS: dict[str, EncoderPreset] = {preset.name: preset for preset in (
    EncoderPreset("minilm", "sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2",
                  "mean", True, 384, 256, paper="Reimers & Gurevych 2019 (Sentence-BERT)"),
    EncoderPreset("dpr", "facebook/dpr-question_encoder-single-nq-base", "facebook/dpr-ctx_encoder-single-nq-base",
                  "cls", False, 768, 256, passage_format="title-text-pair", paper="Karpukhin et al. 2020, §3.1"),
    EncoderPreset("contriever", "facebook/contriever", "facebook/contriever", "mean", False, 768, 512,
                  passage_format="title-space-text", paper="Izacard et al. 2022, §3"),
    EncoderPreset("contriever-msmarco", "facebook/contriever-msmarco", "facebook/contriever-msmarco", "mean", False,
                  768, 512, passage_format="title-space-text", paper="Izacard et al. 2022, App. A.1"),
    EncoderPreset("dragon-plus", "facebook/dragon-plus-query-encoder", "facebook/dragon-plus-context-encoder",
                  "cls", False, 768, 512, passage_format="title-text-pair", paper="Lin et al. 2023, §3"),
    EncoderPreset("e5", "intfloat/e5-base-v2", "intfloat/e5-base-v2", "mean", True, 768, 512,
                  query_prefix="query: ", passage_prefix="passage: ", passage_format="title-space-text",
                  onnx_file="onnx/model.onnx", paper="Wang et al. 2022, §4.1"),
    EncoderPreset("bge", "BAAI/bge-base-en-v1.5", "BAAI/bge-base-en-v1.5", "cls", True, 768, 512,
                  query_prefix=BGE_INSTRUCTION, passage_format="title-space-text", onnx_file="onnx/model.onnx",
                  paper="Xiao et al. 2023, §3.3"),
)}
DEFAULT_PRESET = "minilm"


def get_preset(name: str) -> EncoderPreset:
    """The preset called ``name``; SettingError listing the presets otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise SettingError("encoder", f"--encoder {name!r} is not an encoder preset",
                           f"choose one of {', '.join(PRESETS)}") from None


def passage_input(preset: EncoderPreset, title: str, text: str) -> str | tuple[str, str]:
    """What the passage encoder reads for a passage: one string, or a (title, text) pair."""
    if preset.passage_format == "title-text-pair":
        return (title, text)
    if not title:
        return preset.passage_prefix + text
    joiner = "\n" if preset.passage_format == "title-newline-text" else " "
    return f"{preset.passage_prefix}{title}{joiner}{text}"
