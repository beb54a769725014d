"""Calibrated fusion: weights fitted by logistic regression, kept in a TOML run file, marked in labels.

The end-to-end test runs `winnow eval` with the real SmolLM2-135M model over a real BM25 index,
fits on that run with `winnow fit-fusion`, and runs again from the file it wrote.
"""

import json

import numpy as np
import pytest
from fast_model import suite_model
from test_evaluation import CORPUS, QUESTIONS, make_bench, read_lines, winnow

from winnow.commands.fusion import fusion_toml
from winnow.config import config_layers, read_config
from winnow.errors import WinnowError
from winnow.evaluation.fusion_fit import fit_logistic
from winnow.evaluation.runner import run_label
from winnow.methods import method_settings, resolve_settings
from winnow.records import Candidate, CandidateList, Passage, Query, StageScore
from winnow.run_spec import RunSpec
from winnow.settings import SettingError
from winnow.stages import ScoreFusion
from winnow.stages.fusion import calibrated, sigmoid

MODEL = suite_model()


def test_the_fit_is_the_penalised_maximum_likelihood():
    rng = np.random.default_rng(0)
    features = [(float(r), float(f)) for r, f in rng.random((60, 2))]
    labels = [int(r + 0.5 * f + rng.normal(0, 0.3) > 0.9) for r, f in features]
    fit = fit_logistic(features, labels, l2=1e-3)
    w = np.array(fit.weights)
    x = np.column_stack([np.array(features), np.ones(60)])
    p = 1 / (1 + np.exp(-(x @ w)))
    # The gradient of the penalised log-likelihood vanishes at the fitted weights (to their rounding).
    gradient = x.T @ (p - np.array(labels)) + np.array([1e-3 * 60 * w[0], 1e-3 * 60 * w[1], 0.0])
    assert np.abs(gradient).max() < 1e-3
    assert fit.weights[0] > fit.weights[1] > 0  # the label leans on r twice as much as on f
    assert (fit.passages, fit.relevant) == (60, sum(labels))


def test_one_class_alone_cannot_be_fitted():
    with pytest.raises(WinnowError, match="relevant and irrelevant"):
        fit_logistic([(0.1, 0.2), (0.9, 0.4)], [1, 1])


def test_the_stage_ranks_by_the_fitted_probability():
    query = Query(text="q")
    scored = [("a", 3.0, 0.2), ("b", 2.0, 0.9), ("c", 1.0, 0.5)]  # id, BM25, P("True")
    base = CandidateList(query, [Candidate(Passage(id=pid, text=pid), [StageScore("bm25", first, rank),
                                                                        StageScore("rerank", llm, rank)])
                                 for rank, (pid, first, llm) in enumerate(scored, start=1)])
    weights = (4.0, 1.0, -2.0)
    listed = ScoreFusion(0.0, first_stage="bm25", reranker="rerank", weights=weights).rank(base)
    # a: σ(4·0.2 + 1·1 - 2) = σ(-0.2); b: σ(3.6 + 0.5 - 2) = σ(2.1); c: σ(2 + 0 - 2) = σ(0)
    assert [c.passage.id for c in listed] == ["b", "c", "a"]
    assert [c.score for c in listed] == pytest.approx([sigmoid(2.1), sigmoid(0.0), sigmoid(-0.2)])
    assert calibrated([0.2, 0.9, 0.5], [3.0, 2.0, 1.0], weights) == pytest.approx(
        [sigmoid(-0.2), sigmoid(2.1), sigmoid(0.0)])


def test_the_weights_are_a_typed_setting_marked_as_not_the_papers(tmp_path):
    settings = method_settings("rankrag", fusion_weights=[4, 1.5, -2])
    assert settings.fusion_weights == (4.0, 1.5, -2.0) and settings.to_dict()["fusion_weights"] == [4.0, 1.5, -2.0]
    assert "fusion_weights" in settings.deviations()
    for bad, message in [({"fusion_weights": [1, 2]}, "3 numbers"), ({"fusion_weights": [1, "x", 2]}, "number"),
                         ({"fusion_weights": 3}, "list of numbers"),
                         ({"fusion_weights": [1, 2, 3], "fusion_alpha": 0.5}, "cannot both be set")]:
        with pytest.raises(SettingError, match=message) as caught:
            method_settings("rankrag", **bad)
        assert caught.value.setting == "fusion_weights"
    # Through a TOML run file and the one resolver, back to the same tuple.
    path = tmp_path / "fused.toml"
    path.write_text(fusion_toml((4.0, 1.5, -2.0), method="rankrag", source="runs/x", fitted_on="3 questions"))
    config = read_config(path)
    resolved = resolve_settings("rankrag", config_layers(config, "rankrag", path))
    assert resolved.settings.fusion_weights == (4.0, 1.5, -2.0)
    spec = RunSpec.resolve(config=path, run={"model": "smollm2-135m"})
    assert run_label(spec) == "rankrag smollm2-135m N=20 k=5 fusion_weights=[4.0, 1.5, -2.0] (not the paper's)"


@pytest.mark.llm
def test_fit_on_a_run_then_run_from_the_file_it_wrote(tmp_path):
    bench = make_bench(tmp_path, CORPUS, QUESTIONS)
    common = ("--index", bench / "idx", "--queries", bench / "qa.jsonl", "--model", MODEL, "--method",
              "rankrag", "--n", "3", "--k", "1", "--limit", "2")
    winnow("eval", *common, "--out", tmp_path / "tuning")
    # The reranker passed on its top 1 and still recorded every retrieved passage's P("True").
    reranked = [next(s for s in line["stages"] if s["stage"] == "rerank")
                for line in read_lines(tmp_path / "tuning" / "answers.jsonl")]
    assert all(len(s["ids"]) == len(s["scores"]) > 1 for s in reranked)
    passages = sum(len(s["ids"]) for s in reranked)
    fitted = json.loads(winnow("fit-fusion", tmp_path / "tuning", "--out", tmp_path / "fused.toml", "--json").stdout)
    assert fitted["questions"] == 2 and fitted["passages"] == passages and 0 < fitted["relevant"] < passages
    weights = fitted["fusion_weights"]
    assert read_config(tmp_path / "fused.toml") == {"method": "rankrag", "rankrag": {"fusion_weights": weights}}
    winnow("eval", *common, "--config", tmp_path / "fused.toml", "--out", tmp_path / "fused")
    metrics = json.loads((tmp_path / "fused" / "metrics.json").read_text())
    assert "fusion_weights" in metrics["run"]["deviations"] and "(not the paper's)" in metrics["run"]["label"]
    first = read_lines(tmp_path / "fused" / "answers.jsonl")[0]
    assert [s["stage"] for s in first["stages"]] == ["retrieve", "rerank", "fusion", "generate"]
    # Fitted on gold answers, no qrels: with qrels instead, the labels are the judged passages.
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 paris 1\nq2 0 mona 1\nq3 0 jupiter 1\nq4 0 rome 1\n")
    judged = json.loads(winnow("fit-fusion", tmp_path / "tuning", "--qrels", qrels, "--json").stdout)
    assert 1 <= judged["relevant"] <= 2 and judged["passages"] == passages  # one judged passage per question
    refused = winnow("fit-fusion", tmp_path / "nowhere", check=False)
    assert refused.returncode == 2 and "answers.jsonl does not exist" in refused.stderr
