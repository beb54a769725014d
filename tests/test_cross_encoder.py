"""The trained reranker baselines (RankRAG Table 6, RRR Tables 1-3): cross-encoders and monoT5.

The hub cannot be reached here, so the models are built in the test, small and random but real:
a BertForSequenceClassification (hidden 32, 2 layers) on the all-MiniLM-L6-v2 package's WordPiece
tokenizer, and a T5ForConditionalGeneration on a word-level tokenizer whose vocabulary holds "true"
and "false", each saved once per module and loaded from its folder as a user's download would be.
Scores are checked against transformers run directly (the reference), then the order they give
through every door: the rerank use case, `winnow rerank --method cross-encoder --model DIR`,
`POST /v1/rerank` and TEI's `/rerank`, RankGPT's `rerank=` setting, and the framework adapters' core.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from small_corpus import PASSAGES  # noqa: E402
from tiny_rerankers import save_tiny_cross_encoder  # noqa: E402

from winnow.errors import ModelError  # noqa: E402
from winnow.models.rerankers import MONOT5_TEMPLATE, load_pair_scorer  # noqa: E402
from winnow.records import Passage  # noqa: E402
from winnow.rerank import rerank  # noqa: E402
from winnow.stages.cross_encoder import pair_text  # noqa: E402

QUERY = "capital of france"
DOCS = [Passage("p0", "bananas are yellow"), Passage("p1", "paris is the capital of france", "Paris"),
        Passage("p2", "rome is the capital of italy"), Passage("p3", "the capital of france is paris"),
        Passage("p4", "france")]
T5_WORDS = ["<pad>", "</s>", "<unk>", "Query", ":", "Document", "Relevant", "true", "false", "capital", "of",
            "france", "paris", "Paris", "is", "the", "bananas", "are", "yellow", "rome", "italy"]


@pytest.fixture(scope="module")
def cross_encoder_dir(tmp_path_factory) -> Path:
    """A tiny random cross-encoder on MiniLM's real tokenizer (initialised wide, so scores differ)."""
    return save_tiny_cross_encoder(tmp_path_factory.mktemp("cross-encoder"))


@pytest.fixture(scope="module")
def monot5_dir(tmp_path_factory) -> Path:
    """A tiny random T5 with a word-level tokenizer (built with `tokenizers`) that knows true/false."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    folder = tmp_path_factory.mktemp("monot5")
    words = Tokenizer(models.WordLevel({w: i for i, w in enumerate(T5_WORDS)}, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    words.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    transformers.PreTrainedTokenizerFast(tokenizer_object=words, pad_token="<pad>", eos_token="</s>",
                                         unk_token="<unk>").save_pretrained(folder)
    torch.manual_seed(0)
    config = transformers.T5Config(vocab_size=len(T5_WORDS), d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                   num_decoder_layers=2, num_heads=4, decoder_start_token_id=0, pad_token_id=0,
                                   eos_token_id=1)
    transformers.T5ForConditionalGeneration(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def reference(cross_encoder_dir, monot5_dir):
    """Scores computed with transformers directly, one pair at a time: ``reference(kind, query, texts)``."""
    ce_tokenizer = transformers.AutoTokenizer.from_pretrained(cross_encoder_dir)
    ce_model = transformers.AutoModelForSequenceClassification.from_pretrained(cross_encoder_dir).eval()
    t5_tokenizer = transformers.AutoTokenizer.from_pretrained(monot5_dir)
    t5_model = transformers.T5ForConditionalGeneration.from_pretrained(monot5_dir).eval()
    true, false = T5_WORDS.index("true"), T5_WORDS.index("false")

    def cross_encoder(query: str, text: str) -> float:
        return ce_model(**ce_tokenizer(query, text, return_tensors="pt")).logits[0, 0].item()

    def monot5(query: str, text: str) -> float:
        """Nogueira et al. (2020): softmax over the logits of "true"/"false" at the first decoder step."""
        encoded = t5_tokenizer(MONOT5_TEMPLATE.format(query=query, document=text), return_tensors="pt")
        logits = t5_model(**encoded, decoder_input_ids=torch.tensor([[0]])).logits[0, 0]
        return torch.softmax(logits[[true, false]], dim=-1)[0].item()

    def scores(kind: str, query: str, texts: list[str]) -> list[float]:
        with torch.no_grad():
            return [(cross_encoder if kind == "cross-encoder" else monot5)(query, text) for text in texts]

    return scores


def order_of(scores: list[float]) -> list[str]:
    return [DOCS[i].id for i in sorted(range(len(scores)), key=lambda i: -scores[i])]


@pytest.mark.parametrize("kind", ["cross-encoder", "monot5"])
def test_scores_and_order_match_transformers_and_the_trace_keeps_cut_scores(kind, cross_encoder_dir, monot5_dir,
                                                                           reference):
    folder = cross_encoder_dir if kind == "cross-encoder" else monot5_dir
    texts = [pair_text(p) for p in DOCS]
    assert texts[1] == "Paris paris is the capital of france"  # title, a space, text
    expected = reference(kind, QUERY, texts)
    assert len({round(s, 4) for s in expected}) == len(expected)  # the order below is decided by the scores
    done = rerank(QUERY, DOCS, kind, model=str(folder), keep=2)
    got = {c.passage.id: c.score for c in done.ranked}
    assert [c.passage.id for c in done.ranked] == order_of(expected)[:2]
    for pid, score in got.items():
        assert score == pytest.approx(expected[int(pid[1])], abs=1e-5)
    stage = done.trace.stages[0]
    assert stage.kind == kind and stage.settings["model"] == str(folder) and len(stage.output) == 2
    details = stage.to_dict()["details"]
    assert details["ranked_ids"] == order_of(expected)  # the whole order, the three cut included
    assert details["scores"] == pytest.approx({p.id: s for p, s in zip(DOCS, expected, strict=True)}, abs=1e-5)
    assert details["model"] == str(folder) and details["truncated"] == 0
    if kind == "cross-encoder":  # past the model's 64 positions a pair is cut, not an index error
        long = rerank(QUERY, [Passage("long", "paris " * 200)], kind, model=str(folder))
        assert long.trace.stages[0].details.truncated == 1 and long.trace.stages[0].settings["max_length"] == 64
    if kind == "monot5":
        assert all(0.0 < s < 1.0 for s in expected)


def test_monot5_cuts_a_long_document_but_keeps_relevant(monot5_dir):
    scorer = load_pair_scorer("monot5", str(monot5_dir), max_length=12)
    text, cut = scorer.prompt(QUERY, "paris is the capital of france bananas are yellow")
    assert cut and text == "Query: capital of france Document: paris is Relevant:"  # 11 words + </s> = 12
    assert scorer.prompt(QUERY, "paris")[1] is False
    assert scorer.score(QUERY, ["paris is the capital of france bananas are yellow", "paris"]).truncated == 1


def test_a_hub_id_offline_is_one_line_naming_the_model(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # as on this machine; a name no cache holds
    with pytest.raises(ModelError) as caught:
        load_pair_scorer("cross-encoder", "winnow-tests/no-such-reranker")
    message = str(caught.value)
    assert "'winnow-tests/no-such-reranker'" in message and "cannot be downloaded" in message
    assert "\n" not in message
    assert "--local-dir" in caught.value.hint and "--model DIR" in caught.value.hint
    with pytest.raises(ModelError, match="neither a folder nor a hub id"):
        load_pair_scorer("monot5", str(tmp_path / "no" / "such" / "folder"))


def test_the_cli_reranks_a_jsonl_file_with_a_model_folder(cross_encoder_dir, reference, tmp_path):
    from typer.testing import CliRunner

    from winnow.cli import app

    passages = tmp_path / "passages.jsonl"
    passages.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in DOCS), encoding="utf-8")
    result = CliRunner().invoke(app, ["rerank", "--method", "cross-encoder", "--model", str(cross_encoder_dir),
                                      "--top-n", "3", "--json", QUERY, str(passages)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    expected = reference("cross-encoder", QUERY, [pair_text(p) for p in DOCS])
    assert [r["id"] for r in data["results"]] == order_of(expected)[:3]
    assert data["usage"]["calls"] == 0 and data["trace"]["stages"][0]["kind"] == "cross-encoder"
    refused = CliRunner().invoke(app, ["rerank", "--method", "monot5", "--backend", "openai", QUERY, str(passages)])
    assert "--backend applies to an LLM, and --method monot5 runs none" in str(refused.exception)


@pytest.fixture(scope="module")
def served(tmp_path_factory, cross_encoder_dir, monot5_dir):
    """The HTTP app of `winnow serve --rerank-model cross-encoder=DIR --rerank-model monot5=DIR` over the
    small index; its LLM is an OpenAI-compatible server that is not there (no rerank here calls it)."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient
    from service_server import build_small_index

    from winnow.index import open_retriever
    from winnow.llm.client import LLM
    from winnow.llm.openai_http import OpenAICompatibleBackend
    from winnow.pipeline import Pipeline
    from winnow.run_spec import RunSpec
    from winnow.service import Service
    from winnow.service.app import create_app

    folder = tmp_path_factory.mktemp("served")
    index = open_retriever(build_small_index(folder))
    llm = LLM(OpenAICompatibleBackend("absent", base_url="http://127.0.0.1:9/v1", context_size=4096))
    pipeline = Pipeline.from_parts(RunSpec(method="rankgpt", model="absent", backend="openai"), index, llm)
    service = Service(pipeline, cache=False, rerank_models={"cross-encoder": str(cross_encoder_dir),
                                                            "monot5": str(monot5_dir)})
    with TestClient(create_app(service), base_url="http://127.0.0.1") as client:
        yield client, index, llm
    service.worker.close()


def test_v1_rerank_and_tei_shape_run_the_servers_models(served, cross_encoder_dir, monot5_dir, reference):
    client, _, _ = served
    texts = [p.text for p in DOCS]  # bare strings: no titles
    response = client.post("/v1/rerank", json={"query": QUERY, "documents": texts, "method": "cross-encoder",
                                               "top_n": 3, "model": "rerank-english-v3.0"})
    assert response.status_code == 200, response.text
    body = response.json()
    expected = reference("cross-encoder", QUERY, texts)
    assert [r["index"] for r in body["results"]] == [int(pid[1]) for pid in order_of(expected)[:3]]
    for result in body["results"]:  # the logit's sigmoid: a 0-1 relevance, as hosted APIs give
        assert result["relevance_score"] == pytest.approx(1 / (1 + math.exp(-expected[result["index"]])), abs=1e-5)
    assert body["model"] == str(cross_encoder_dir) and body["usage"]["calls"] == 0
    assert body["meta"]["notes"] == [f"model 'rerank-english-v3.0' ignored: this server reranks with "
                                     f"{cross_encoder_dir}"]
    tei = client.post("/rerank", json={"query": QUERY, "texts": texts, "method": "monot5", "raw_scores": True})
    assert tei.status_code == 200, tei.text
    expected = reference("monot5", QUERY, texts)
    assert [r["index"] for r in tei.json()] == [int(pid[1]) for pid in order_of(expected)]
    assert [r["score"] for r in tei.json()] == pytest.approx(sorted(expected, reverse=True), abs=1e-5)
    listed = {m["id"]: m["role"] for m in client.get("/v1/models").json()["data"]}
    assert listed[str(monot5_dir)] == "rerank method 'monot5' (loaded on first use)"
    refused = client.post("/v1/ask", json={"question": QUERY, "options": {"rerank": "cross-encoder",
                                                                          "rerank_model": "/etc"}})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "options.rerank_model"


def test_rankgpt_rerank_setting_runs_the_cross_encoder(served, cross_encoder_dir, reference):
    from winnow.methods import build_method, method_settings
    from winnow.records import Query
    from winnow.settings import SettingError
    from winnow.stages.contract import QuestionState, run_stages

    _, index, llm = served  # the cross-encoder re-ranker calls no LLM; the reader is not run here
    method = build_method("rankgpt", index=index, llm=llm, n=5, k=3, rerank="cross-encoder",
                          rerank_model=str(cross_encoder_dir))
    assert "rerank" in method.settings.deviations()  # a baseline, not the paper's listwise h
    state = QuestionState(Query("capital of france"))
    run_stages(method.recipe[:-1], [state])  # retrieve, cross-encoder, fusion (off), keep top k
    stage = next(s for s in state.trace.stages if s.kind == "cross-encoder")
    retrieved = [Passage(c["id"], c["text"], c.get("title", "")) for c in stage.input]
    expected = reference("cross-encoder", "capital of france", [pair_text(p) for p in retrieved])
    best = [retrieved[i].id for i in sorted(range(len(expected)), key=lambda i: -expected[i])]
    assert [p.id for p in state.ranked.passages] == best[:3]
    with pytest.raises(SettingError, match="second_pass_depth"):
        method_settings("rankgpt", rerank="monot5", second_pass_depth=30)
    with pytest.raises(SettingError, match="rerank_model"):
        method_settings("rrr", rerank="listwise", rerank_model=str(cross_encoder_dir))
    assert {p["id"] for p in PASSAGES} >= set(best)


def test_the_adapters_core_runs_a_trained_reranker(monot5_dir, reference):
    from winnow.integrations.core import Winnower

    winnower = Winnower("monot5", model=str(monot5_dir), top_k=2)
    texts = [p.text for p in DOCS]
    result = winnower.run(QUERY, texts)
    expected = reference("monot5", QUERY, texts)
    assert [k.index for k in result.kept] == [int(pid[1]) for pid in order_of(expected)[:2]]
    assert [k.relevance for k in result.kept] == pytest.approx(sorted(expected, reverse=True)[:2], abs=1e-5)
    assert len(result.dropped) == 3 and winnower.config()["model"] == str(monot5_dir)
    assert os.environ.get("HF_HUB_OFFLINE") is None  # the offline test's setting did not leak
