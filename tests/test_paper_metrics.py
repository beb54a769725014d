"""The papers' own metrics (issue 29, item 3): FEVER's label accuracy, multiple-choice accuracy by
MIRAGE's answer reader, ASQA's str-em and ROUGE-L, and qrels metrics at a relevance level, nDCG@1/5
and MAP against pytrec_eval (trec_eval itself)."""

from __future__ import annotations

import pytest

from winnow.answers import (
    accuracy,
    answer_scores,
    choice_accuracy,
    chosen_letter,
    label_accuracy,
    match_accuracy,
    popqa_accuracy,
    rouge_l,
    stated_label,
    str_em,
)
from winnow.evaluation.metrics import answer_means
from winnow.evaluation.retrieval import default_relevance_level, qrels_metrics, run_from_ranked

# --- FEVER ------------------------------------------------------------------------------------------


def test_fever_accuracy_reads_the_stated_label_not_a_substring():
    assert accuracy("untrue", ["True"]) == 0.0  # containment would say 1.0
    assert accuracy("True", ["True"]) == 1.0
    assert accuracy("False. The film was released in 1999.", ["False"]) == 1.0
    assert accuracy("The claim is true.", ["True"]) == 1.0
    assert accuracy("The claim is true.", ["False"]) == 0.0
    # Both labels and no first-word label: states nothing, so wrong whatever the gold.
    assert accuracy("It is true that it is false", ["True"]) == 0.0
    assert accuracy("falsehood", ["False"]) == 0.0
    # KILT's own label names, echoed by a model, state the same labels.
    assert label_accuracy("SUPPORTS", ["True"]) == 1.0 and label_accuracy("Refuted.", ["false"]) == 1.0
    assert stated_label("FALSE, because the Mona Lisa is by Leonardo") == "false"
    assert stated_label("I cannot tell") is None


def test_a_negated_label_states_the_other_label():
    assert stated_label("It is not true") == "false" and accuracy("It is not true", ["True"]) == 0.0
    assert stated_label("The claim isn't false.") == "true"
    assert accuracy("This is not true: the film came out in 2001.", ["False"]) == 1.0


# The cited containment tests against Winnow's normalised one, on hand cases where they part.
CITED = [  # prediction, gold, Winnow's accuracy, Self-RAG's match, PopQA's
    ("paris", "Paris", 1, 0, 1),
    ("Paris", "paris", 1, 0, 1),
    ("Beatles", "The Beatles", 1, 0, 0),
    ("The Beatles", "Beatles", 1, 1, 1),
    ("US", "U.S.", 1, 0, 0),
    ("the u.s. army", "U.S.", 1, 0, 1),
    ("It opened in 1994.", "1994", 1, 1, 1),
    ("the U.S.", "US", 1, 0, 0),
    ("LONDON", "London", 1, 0, 0),
    ("an apple", "Apple", 1, 0, 1),
    ("Leonardo da Vinci", "Michelangelo", 0, 0, 0),
]


@pytest.mark.parametrize("prediction, gold, ours, match, popqa", CITED)
def test_the_cited_containment_tests_are_recorded_beside_winnows(prediction, gold, ours, match, popqa):
    assert accuracy(prediction, [gold]) == ours
    assert match_accuracy(prediction, [gold]) == match
    assert popqa_accuracy(prediction, [gold]) == popqa
    scores = answer_scores(prediction, [gold])
    assert (scores["accuracy"], scores["accuracy_match"], scores["accuracy_popqa"]) == (ours, match, popqa)


def test_labels_choices_and_patterns_have_no_cited_containment_score():
    assert "accuracy_match" not in answer_scores("True", ["True"])
    assert "accuracy_match" not in answer_scores("A", ["A"], metadata={"choices": {"A": "x", "B": "y"}})
    assert "accuracy_match" not in answer_scores("1963", ["19[0-9]+"], regex=True)


def test_open_qa_accuracy_is_still_containment():
    # Gold answers that are not labels keep the PopQA/TriviaQA containment rule.
    assert accuracy("It was in 1963, I think", ["1963"]) == 1.0
    assert accuracy("untrue", ["untrue story"]) == 0.0


# --- multiple choice: MIRAGE's locate_answer -------------------------------------------------------

ABCD = ["A", "B", "C", "D"]


@pytest.mark.parametrize("answer, letter", [
    ("B", "B"),                                   # the letter alone
    ("  C\n", "C"),                               # stripped first, as MIRAGE's split(...)[-1].strip()
    ("B or C", "B"),                              # "^X or"
    ("D and maybe A", "D"),                       # "^X and"
    ("C/D", "C"),                                 # "^X/"
    ("A, but option C is close", "A"),            # "^X," is tried before "Option X"
    ("I would pick option C here", "C"),          # "[Oo]ption X" anywhere
    ("The answer is Option D.", "D"),
    ("Answer: B", "B"),                           # ":\\s*X" anywhere
    ("C. Because the nerve...", "C"),             # "^X\\."
    ('{"step_by_step_thinking": "x", "answer_choice": "B"}', "B"),  # MedRAG's JSON answer
    ("I am not sure.", "A"),                      # nothing matches: MIRAGE answers "A"
    ("b", "A"),                                   # case-sensitive, as MIRAGE's patterns
])
def test_chosen_letter_follows_mirage_locate_answer(answer, letter):
    assert chosen_letter(answer, ABCD) == letter


def test_choice_accuracy_with_the_questions_own_letters():
    # ARC-Challenge has questions labelled 1-4 and five-option ones.
    assert chosen_letter("3", ["1", "2", "3", "4"]) == "3"
    assert chosen_letter("Option E", ["A", "B", "C", "D", "E"]) == "E"
    # MIRAGE reads A-D for every set: a "D" for PubMedQA's yes/no/maybe is read as D, and is wrong.
    assert chosen_letter("D", ["A", "B", "C"]) == "D"
    assert choice_accuracy("D", ["A"], ["A", "B", "C"]) == 0.0
    assert choice_accuracy("Answer: B", ["B"], ABCD) == 1.0
    assert choice_accuracy("Answer: C", ["B"], ABCD) == 0.0
    scores = answer_scores("Option B", ["B"], metadata={"choices": {"A": "x", "B": "y", "C": "z", "D": "w"}})
    assert scores["accuracy"] == 1.0 and "str_em" not in scores


# --- ASQA --------------------------------------------------------------------------------------------


def test_str_em_follows_alce():
    groups = [["Paris"], ["Lyon", "Lyons"], ["Marseille"]]
    # ALCE: per sub-question, any short answer a substring of the normalised output; mean over them.
    assert str_em("The first was in Paris, the second in Lyons.", groups) == pytest.approx(2 / 3)
    assert str_em("nothing", groups) == 0.0
    assert str_em("The Paris one", [["the paris"]]) == 1.0  # both sides SQuAD-normalised


def test_rouge_l_hand_computed():
    # LCS of "the cat sat on the mat" and "the cat is on the mat" is 5 words: P = R = F = 5/6.
    assert rouge_l("The cat sat on the mat.", ["the cat is on the mat"]) == pytest.approx(5 / 6, abs=1e-6)
    # The best over the long answers; Porter stemming makes "cats"/"cat" one word.
    assert rouge_l("cats sat", ["dogs ran", "the cat sat"]) == pytest.approx(0.8, abs=1e-6)
    assert rouge_l("anything", []) == 0.0


def test_asqa_scores_and_their_means():
    metadata = {"qa_pairs": [["1999"], ["2004"]], "long_answers": ["It came out in 1999 and again in 2004."]}
    scores = answer_scores("It came out in 1999.", ["1999", "2004"], metadata=metadata)
    assert scores["str_em"] == 0.5 and 0 < scores["rouge_l"] < 1
    from types import SimpleNamespace

    from winnow.evaluation.schema import Scores

    records = [SimpleNamespace(scores=Scores(**scores)), SimpleNamespace(scores=Scores(em=1.0, f1=1.0, accuracy=1.0))]
    means = answer_means(records)
    assert means.accuracy == 1.0 and means.str_em == 0.5  # over the questions that have it
    assert answer_means(records[1:]).str_em is None
    assert "str_em" not in answer_means(records[1:]).to_json()


# --- qrels: relevance level, nDCG@1/5, MAP, against pytrec_eval -------------------------------------

QRELS = {"q1": {"a": 1, "b": 2, "c": 3, "d": 0}, "q2": {"x": 1, "y": 1}, "q3": {"m": 2, "k": 0},
         "q4": {"e": 0}}
RANKED = {"q1": ["d", "a", "c", "z", "b"], "q2": ["x", "w"], "q3": ["n", "m"], "q4": ["e"]}


@pytest.mark.parametrize("level", [1, 2, 3])
def test_qrels_metrics_match_trec_eval_at_each_relevance_level(level):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    got = qrels_metrics(QRELS, RANKED, recall_ks=(1, 5), relevance_level=level)
    judged = ["q1", "q2", "q3"]  # q4 has no judgement of 1 or more: left out at every level
    evaluator = pytrec_eval.RelevanceEvaluator({q: QRELS[q] for q in judged},
                                               {"ndcg_cut.1,5,10", "map", "recall.1,5"}, relevance_level=level)
    reference = evaluator.evaluate(run_from_ranked({q: RANKED[q] for q in judged}))

    def mean_of(measure):
        return sum(reference[q][measure] for q in judged) / len(judged)

    assert got["judged_questions"] == 3 and got["unjudged_questions"] == 1
    for ours, theirs in [("nDCG@1", "ndcg_cut_1"), ("nDCG@5", "ndcg_cut_5"), ("nDCG@10", "ndcg_cut_10"),
                         ("MAP", "map"), ("R@1", "recall_1"), ("R@5", "recall_5")]:
        assert got[ours] == pytest.approx(mean_of(theirs)), ours
    # MRR@10 by hand (pytrec_eval's recip_rank has no cut-off): first document at the level.
    first = {1: [2, 1, 2], 2: [3, None, 2], 3: [3, None, None]}[level]
    assert got["MRR@10"] == pytest.approx(sum(1 / r for r in first if r) / 3)


def test_grade_one_is_not_relevant_at_trec_dl_level():
    got = qrels_metrics({"q": {"related": 1, "relevant": 2}}, {"q": ["related", "relevant"]}, recall_ks=(1,),
                        relevance_level=2)
    assert got["MRR@10"] == 0.5 and got["R@1"] == 0.0
    with pytest.raises(ValueError, match="at least 1"):
        qrels_metrics({}, {}, relevance_level=0)


def test_default_relevance_level_per_dataset():
    assert default_relevance_level(["dl19-passage"]) == 2
    assert default_relevance_level(["irds:msmarco-passage/trec-dl-2020/judged"]) == 2
    assert default_relevance_level(["beir/scifact", ""]) == 1
    assert default_relevance_level([]) == 1


def test_metrics_json_records_the_relevance_level_and_asqa_means():
    from run_records import line, run_info

    from winnow.evaluation.metrics import compute_metrics

    def record(qid, ids, scores):
        return line(id=qid, scores=scores, first_stage={"ids": ids}, final={"ids": ids}, seconds=1.0,
                    method_seconds=1.0)

    records = [record("q1", ["related", "relevant"], {"em": 0.0, "f1": 0.5, "accuracy": 1.0, "str_em": 0.5}),
               record("q2", ["x"], {"em": 1.0, "f1": 1.0, "accuracy": 1.0})]
    qrels = {"q1": {"related": 1, "relevant": 2}, "q2": {"x": 1}}
    metrics = compute_metrics(records, selected=2, run=run_info(), depth=20, qrels=qrels,
                              relevance_level=2).to_json()
    assert metrics["qrels"]["relevance_level"] == 2
    final = metrics["qrels"]["rows"]["final"]
    assert final["MRR@10"] == pytest.approx(0.25)  # q1: 1/2 at level 2; q2: grade 1 only, 0
    assert set(final) >= {"nDCG@1", "nDCG@5", "nDCG@10", "MAP"}
    assert metrics["answer"] == {"em": 0.5, "f1": 0.75, "accuracy": 1.0, "str_em": 0.5}


# --- the headline accuracy: the cited metric under a paper profile ------------------------------------

def test_a_paper_profile_quotes_the_cited_accuracy_and_keeps_winnows_beside_it():
    """RankRAG §5.1 and MAIN-RAG §4.1 cite Self-RAG's `match` (PopQA's own test on PopQA); a run under
    a paper profile quotes it as its accuracy, and the normalised containment stays in ``answer``."""
    from run_records import line, run_info

    from winnow.commands.eval_tables import metrics_headline
    from winnow.evaluation.metrics import cited_accuracy, compute_metrics

    assert cited_accuracy(None, ["nq"]) == "accuracy"
    assert cited_accuracy("paper", ["nq", "triviaqa"]) == "accuracy_match"
    assert cited_accuracy("paper-70b", ["popqa", "popqa-longtail"]) == "accuracy_popqa"
    assert cited_accuracy("paper", ["popqa", "nq"]) == "accuracy_match"
    # "paris" against gold "Paris": contained once normalised, not a raw case-sensitive match.
    scores = answer_scores("paris", ["Paris"])
    records = [line(id="q1", scores=scores, seconds=1.0, method_seconds=1.0)]
    quoted = compute_metrics(records, selected=1, run=run_info(), depth=20, headline="accuracy_match").to_json()
    assert quoted["headline_accuracy"] == "accuracy_match"
    assert quoted["answer"]["accuracy"] == 1.0 and quoted["answer"]["accuracy_match"] == 0.0
    assert "accuracy (Self-RAG's match) 0.0% · normalised containment 100.0%" in metrics_headline(quoted)
    plain = compute_metrics(records, selected=1, run=run_info(), depth=20).to_json()
    assert "headline_accuracy" not in plain and "accuracy 100.0%" in metrics_headline(plain)
    # A label question has no cited containment score: the run quotes its accuracy as it is.
    label = [line(id="q1", scores=answer_scores("True", ["True"]), seconds=1.0, method_seconds=1.0)]
    assert "headline_accuracy" not in compute_metrics(label, selected=1, run=run_info(), depth=20,
                                                      headline="accuracy_match").to_json()


def test_winnow_eval_under_the_paper_profile_quotes_selfrags_match(index, tmp_path):
    """End to end over a scripted OpenAI-compatible server (its answer repeats the prompt, so it holds
    "Paris" and never "paris"): metrics.json and the printed headline quote `match` first."""
    import json

    from cli_runner import winnow
    from fakes import ScriptedServer

    queries = tmp_path / "q.jsonl"
    queries.write_text(json.dumps({"id": "q1", "question": "what is the capital of france",
                                   "golden_answers": ["paris"]}) + "\n")
    server = ScriptedServer(delay=0.0)
    try:
        for profile, out in ((["--profile", "paper", "--framing", "chat"], "paper"), ([], "default")):
            result = winnow("eval", "--index", index.path, "--queries", queries, "--method", "vanilla", "--k", "2",
                            *profile, "--backend", "openai", "--base-url", server.url, "--model", "m",
                            "--out", tmp_path / out)
            assert result.returncode == 0, result.stderr
        paper = json.loads((tmp_path / "paper" / "metrics.json").read_text())
        default = json.loads((tmp_path / "default" / "metrics.json").read_text())
    finally:
        server.stop()
    assert paper["headline_accuracy"] == "accuracy_match"
    assert (paper["answer"]["accuracy_match"], paper["answer"]["accuracy"]) == (0.0, 1.0)
    assert "headline_accuracy" not in default
