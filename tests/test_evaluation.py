"""Evaluation: answer metrics pinned against hand-computed cases, retrieval metrics, and real runs of
``winnow eval`` / ``winnow report`` (SmolLM2-135M, a tiny BM25 corpus), including kill-and-resume."""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_runner import winnow as winnow_in_process
from fast_model import suite_model
from run_records import line, run_info
from run_records import metrics as run_metrics

from winnow.answers import (
    AnswerMatcher,
    accuracy,
    dpr_tokens,
    exact_match,
    has_answer,
    normalize_answer,
    token_f1,
)
from winnow.corpus import load_corpus
from winnow.datasets import QAItem
from winnow.datasets.trec import read_run
from winnow.errors import InputError, WinnowError
from winnow.evaluation.metrics import compute_metrics, stage_labels
from winnow.evaluation.paired import paired_difference, sign_test_p
from winnow.evaluation.report import LoadedRun, paired_table, uncached_cost_table
from winnow.evaluation.retrieval import answer_ranks, answer_recall, qrels_metrics, run_from_ranked
from winnow.evaluation.runfolder import RunFolder
from winnow.evaluation.runner import select_questions
from winnow.index import build_bm25_index
from winnow.models import resolve_model

MODEL = suite_model()

# --- answer metrics --------------------------------------------------------------------------------


def test_squad_normalisation():
    assert normalize_answer("The  Beatles!") == "beatles"
    assert normalize_answer("An apple, a day") == "apple day"
    # Articles only as whole words: "theatre" keeps its "the".
    assert normalize_answer("Theatre") == "theatre"
    assert normalize_answer("  ") == ""


def test_exact_match():
    assert exact_match("The Beatles.", ["beatles"]) == 1.0
    assert exact_match("Beatles band", ["beatles"]) == 0.0
    assert exact_match("Ringo", ["John", "ringo"]) == 1.0  # best over the gold answers
    assert exact_match("x", []) == 0.0
    # A bare string is one answer, not a list of characters.
    assert exact_match("b", "abc") == 0.0


def test_token_f1_hand_computed():
    # prediction "cat sat" (after dropping "the") vs gold "cat": overlap 1, P=1/2, R=1/1 -> F1 = 2/3.
    assert token_f1("the cat sat", ["a cat"]) == pytest.approx(2 / 3)
    # "new york city" vs "york new": overlap 2, P=2/3, R=1 -> 0.8.
    assert token_f1("New York City", ["York, New"]) == pytest.approx(0.8)
    # Multiset overlap: "a a b" -> tokens [b] after article removal; use non-articles instead.
    # "x x y" vs "x z": common x once, P=1/3, R=1/2 -> F1 = 0.4.
    assert token_f1("x x y", ["x z"]) == pytest.approx(0.4)
    assert token_f1("nothing shared", ["other"]) == 0.0
    # Best over golds: 0.4 and 1.0.
    assert token_f1("x z", ["x x y", "z x"]) == 1.0
    # Empty after normalisation: agree only with an empty gold.
    assert token_f1("the", ["a"]) == 1.0
    assert token_f1("the", ["cat"]) == 0.0


def test_accuracy_is_containment_on_normalised_text():
    assert accuracy("I believe it was The Beatles, in 1963.", ["the beatles"]) == 1.0
    assert accuracy("The Rolling Stones", ["Beatles", "Stones"]) == 1.0
    assert accuracy("The Rolling Stones", ["Beatles"]) == 0.0
    # An answer that normalises to nothing is ignored rather than matching everything.
    assert accuracy("anything", ["The"]) == 0.0


def test_regex_answers():
    pattern = [r"(Bill|William( Jefferson)?) Clinton"]
    assert exact_match("William Jefferson Clinton.", pattern, regex=True) == 1.0
    assert exact_match("President Bill Clinton", pattern, regex=True) == 0.0  # must match it all
    assert accuracy("It was President bill clinton.", pattern, regex=True) == 1.0
    assert accuracy("It was Hillary.", pattern, regex=True) == 0.0
    assert token_f1("bill clinton", pattern, regex=True) == 1.0
    assert has_answer("Clinton: Bill Clinton served two terms", pattern, regex=True)
    assert not has_answer("George Bush", pattern, regex=True)
    with pytest.raises(WinnowError, match="not a valid regular expression"):
        has_answer("text", ["(unclosed"], regex=True)


def test_dpr_tokens_and_has_answer():
    # Tokens come out NFD-decomposed: the accent stays inside the word as a combining mark.
    assert dpr_tokens("Caf\u00e9, Paris-France! 3.5") == ["cafe\u0301", ",", "paris", "-", "france", "!", "3", ".", "5"]
    assert has_answer("Paris, France is large.", ["paris"])
    # Token sequences, not substrings: "Paris" is not in "Parisian".
    assert not has_answer("A Parisian cafe", ["Paris"])
    assert has_answer("born in New  York City", ["new york"])
    assert not has_answer("York, New", ["new york"])
    # NFD on both sides: a composed é in the text matches a decomposed é in the answer.
    assert has_answer("Caf\u00e9 society", ["Cafe\u0301"])
    # Punctuation is tokenised the same on both sides, so "U.S." is found inside "the U.S. army".
    assert has_answer("the U.S. army", ["U.S."])
    assert not has_answer("anything", ["   "])
    matcher = AnswerMatcher(["1963", "Ringo Starr"])
    assert [matcher(t) for t in ("in 1963 they", "ringo  starr!", "Starr Ringo")] == [True, True, False]


def test_the_substring_pretest_never_changes_has_answer():
    # AnswerMatcher skips tokenising a passage that lacks an answer token as a substring; the
    # outcome must be DPR's token-sequence test's, also where lower-casing depends on context
    # (Greek final sigma, circled letters that are cased symbols), expands (dotted capital I) or
    # decomposes (NFD accents), and for single-character and punctuation tokens.
    import random

    from winnow.answers import _cached_dpr_tokens, _contains_sequence

    pieces = ["\u03a3", "\u03c3", "\u03c2", "\u0391\u03a3", "\u24b6", "\u0130", "i", "I", "e\u0301", "\u00e9",
              "Paris", "paris", "\u00df", "SS", "\u01c5", "1", "9", " ", " ", ",", "-", ".", "\u3000", "\u00a0"]
    rng = random.Random(7)
    checked = found = 0
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
        answers = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(1, 2))]
        token_answers = [t for t in (dpr_tokens(a) for a in answers) if t]
        expected = any(_contains_sequence(_cached_dpr_tokens(text), t) for t in token_answers)
        assert AnswerMatcher(answers)(text) == expected, (text, answers)
        checked += 1
        found += expected
    assert checked == 3000 and 100 < found < 2900  # both outcomes well exercised


def test_the_stored_token_classes_are_this_pythons():
    import json
    import unicodedata

    from winnow.answers import TOKEN_CLASSES_FILE, build_token_classes

    stored = json.loads(TOKEN_CLASSES_FILE.read_text("utf-8"))
    assert stored[unicodedata.unidata_version] == list(build_token_classes())


# --- retrieval metrics -----------------------------------------------------------------------------


def test_answer_ranks_and_recall_hand_computed():
    matcher = AnswerMatcher(["Uruguay"])
    texts = ["England won in 1966.", "Uruguay hosted and won in 1930.", "Italy won in 1934.", "uruguay again"]
    assert answer_ranks(texts, matcher) == [2, 4]
    # Three questions: first answer at rank 2, at rank 7, and never.
    per_question = [[2, 4], [7], []]
    assert answer_recall(per_question, ks=(1, 2, 5, 10)) == pytest.approx(
        {"R@1": 0.0, "R@2": 1 / 3, "R@5": 1 / 3, "R@10": 2 / 3})
    assert answer_recall([], ks=(5,)) == {"R@5": 0.0}


def test_qrels_metrics_hand_computed():
    qrels = {"q1": {"a": 1, "b": 2, "c": 0}, "q2": {"x": 1}, "q3": {"n": 0}, "q4": {"e": 1}}
    ranked = {"q1": ["c", "a", "d", "b"], "q2": ["y", "z"], "q3": ["n"], "q4": []}
    got = qrels_metrics(qrels, ranked, recall_ks=(1, 2, 4), capped=True)
    # q1: relevant a (1) at rank 2 and b (2) at rank 4; trec_eval's nDCG uses the grade as the gain:
    # DCG = 1/log2(3) + 2/log2(5), ideal = 2/log2(2) + 1/log2(3).
    ndcg_q1 = (1 / math.log2(3) + 2 / math.log2(5)) / (2 + 1 / math.log2(3))
    # q3 has no relevant document: left out. q2 finds nothing; q4's empty list scores 0, not skipped.
    assert got["judged_questions"] == 3 and got["unjudged_questions"] == 1
    assert got["nDCG@10"] == pytest.approx(ndcg_q1 / 3)
    assert got["MRR@10"] == pytest.approx(0.5 / 3)
    assert (got["R@1"], got["R@2"], got["R@4"]) == pytest.approx((0.0, 0.5 / 3, 1 / 3))
    # Capped: q1 at k=2 found 1 of min(2, 2) -> 0.5, same as plain recall here.
    assert got["R_cap@2"] == pytest.approx(0.5 / 3)


def test_capped_recall_divides_by_min_k_relevant():
    qrels = {"q": {f"d{i}": 1 for i in range(10)}}
    got = qrels_metrics(qrels, {"q": ["d0", "x", "d1", "d2"]}, recall_ks=(2, 4), capped=True)
    assert got["R@2"] == pytest.approx(1 / 10) and got["R_cap@2"] == pytest.approx(1 / 2)
    assert got["R@4"] == pytest.approx(3 / 10) and got["R_cap@4"] == pytest.approx(3 / 4)


def test_run_scores_follow_the_list_order_not_the_ids():
    # trec_eval re-sorts by score (ties by docid): the rank-derived scores must keep "z" first.
    assert run_from_ranked({"q": ["z", "a", "z", "m"]}) == {"q": {"z": 4.0, "a": 3.0, "m": 1.0}}
    got = qrels_metrics({"q": {"z": 1}}, {"q": ["z", "a"]}, recall_ks=(1,))
    assert got["MRR@10"] == 1.0 and got["R@1"] == 1.0


# --- run folders, question choice and metric rows (no model) --------------------------------------


def qa_item(qid, question="q?", answers=("a",), **metadata):
    return QAItem(qid, question, list(answers), metadata)


def test_seeded_choice_is_fixed_and_a_larger_limit_extends_it():
    items = [qa_item(f"q{i}") for i in range(50)]
    ten = select_questions(items, limit=10, seed=7)
    assert [i.id for i in ten] == [i.id for i in select_questions(items, limit=10, seed=7)]
    assert [i.id for i in select_questions(items, limit=20, seed=7)][:10] == [i.id for i in ten]
    assert [i.id for i in select_questions(items, limit=10, seed=8)] != [i.id for i in ten]
    assert [i.id for i in select_questions(items, limit=3, seed=None)] == ["q0", "q1", "q2"]


def test_run_folder_cuts_a_torn_last_line_and_refuses_a_damaged_middle_one(tmp_path):
    folder = RunFolder(tmp_path / "run")
    folder.open({"a": 1}, {})
    folder.append(line(id="q1", answer="x"))
    folder.append(line(id="q2", answer="y"))
    folder.close()
    whole = folder.answers_path.read_bytes()
    with folder.answers_path.open("ab") as stream:
        stream.write(b'{"id": "q3", "ans')  # killed while writing
    again = RunFolder(tmp_path / "run")
    assert list(again.read_answers()) == ["q1", "q2"] and again.torn_line_dropped
    assert again.answers_path.read_bytes() == whole
    first, second = whole.splitlines()
    again.answers_path.write_bytes(first + b'\n{"id": \n' + second + b"\n")
    with pytest.raises(InputError, match="line 2"):
        again.read_answers()


def test_run_folder_refuses_another_identity_naming_what_changed(tmp_path):
    RunFolder(tmp_path / "run").open({"spec": {"method": "rankrag"}, "settings": {"n": 20}}, {})
    with pytest.raises(WinnowError, match=r"settings\.n: 20 → 10"):
        RunFolder(tmp_path / "run").open({"spec": {"method": "rankrag"}, "settings": {"n": 10}}, {})
    (tmp_path / "stray").mkdir()
    (tmp_path / "stray" / "answers.jsonl").write_text('{"id": "q1"}\n')
    with pytest.raises(WinnowError, match="no config.json"):
        RunFolder(tmp_path / "stray").open({"a": 1}, {})


def test_a_setting_added_later_resumes_only_at_its_default(tmp_path):
    """A run started before a method gained a setting resumes when the setting keeps its default."""
    folder = tmp_path / "run"
    RunFolder(folder).open({"spec": {"method": "rankgpt"}, "settings": {"n": 10}}, {})
    defaults = {"n": 20, "listwise_prompt": "rrr"}
    config = RunFolder(folder).open({"spec": {"method": "rankgpt"}, "settings": {"n": 10, "listwise_prompt": "rrr"}},
                                    {}, setting_defaults=defaults)
    assert config["identity"]["settings"] == {"n": 10, "listwise_prompt": "rrr"}
    assert json.loads((folder / "config.json").read_text())["identity"]["settings"]["listwise_prompt"] == "rrr"
    with pytest.raises(WinnowError, match=r'settings\.listwise_prompt: "rrr" → "rankgpt"'):
        RunFolder(folder).open({"spec": {"method": "rankgpt"}, "settings": {"n": 10, "listwise_prompt": "rankgpt"}},
                               {}, setting_defaults=defaults)
    other = tmp_path / "other"
    RunFolder(other).open({"spec": {"method": "rankgpt"}, "settings": {"n": 10}}, {})
    # The old run used the default without naming it; the message says so.
    with pytest.raises(WinnowError, match=r'settings\.listwise_prompt: "rrr" → "rankgpt"'):
        RunFolder(other).open({"spec": {"method": "rankgpt"}, "settings": {"n": 10, "listwise_prompt": "rankgpt"}},
                              {}, setting_defaults=defaults)


def record(qid, stages, *, first=(), final=(), accuracy=0.0, seconds=1.0, calls=0):
    def entry(label, ranks, passthrough=False, length=5):
        return {"stage": label, "ids": [f"{qid}-{label}-{i}" for i in range(length)], "answer_ranks": list(ranks),
                "passthrough": passthrough, "seconds": 0.5, "usage": {"calls": calls}}

    return {"id": qid, "scores": {"em": 0.0, "f1": 0.0, "accuracy": accuracy},
            "first_stage": {"ids": [f"{qid}-{i}" for i in range(20)], "answer_ranks": list(first)},
            "stages": [entry(*s) for s in stages], "final": {"ids": ["x"] * 2, "answer_ranks": list(final)},
            "usage": {"calls": calls, "cache_hits": 1, "prompt_tokens": 10 * calls, "completion_tokens": calls,
                      "seconds": seconds}, "seconds": seconds, "method_seconds": seconds}


def test_cost_without_the_cache_adds_the_hits_at_their_first_price():
    def answered(qid, calls, hits, prompt, cached_prompt, seconds, cached_seconds):
        usage = {"calls": calls, "cache_hits": hits, "prompt_tokens": prompt, "completion_tokens": calls,
                 "seconds": seconds, "cached_prompt_tokens": cached_prompt, "cached_completion_tokens": hits,
                 "cached_seconds": cached_seconds}
        return {**record(qid, [("retrieve", [1])], first=[1], final=[1]), "usage": usage}

    records = [line(**answered("q1", 1, 10, 100, 900, 2.0, 18.0)), line(**answered("q2", 0, 11, 0, 1100, 0.0, 20.0))]
    cost = compute_metrics(records, selected=2, run=run_info(), depth=20).cost
    assert (cost.llm_calls, cost.cache_hits, cost.prompt_tokens) == (1, 21, 100)
    assert cost.without_cache is not None and cost.without_cache.to_json() == {
        "llm_calls_per_question": 11.0, "prompt_tokens_per_question": 1050.0,
        "completion_tokens_per_question": 11.0, "llm_seconds_per_question": 20.0}
    table = uncached_cost_table([LoadedRun(Path("r"), {}, run_metrics(cost.to_json(), label="cached run"), records),
                                 LoadedRun(Path("s"), {}, run_metrics(label="fresh"), [])])
    assert table.splitlines()[2:] == ["| cached run | 21 | 11.0 | 1,050 | 11 | 20.00 |"]


def test_sign_test_hand_computed():
    # 8 wins, 1 loss: 2 * (C(9,0) + C(9,1)) / 2^9 = 20/512.
    assert sign_test_p(8, 1) == pytest.approx(20 / 512)
    assert sign_test_p(1, 8) == sign_test_p(8, 1)
    assert sign_test_p(3, 3) == 1.0 and sign_test_p(0, 0) == 1.0
    assert sign_test_p(10, 0) == pytest.approx(2 / 1024)


def test_paired_difference_counts_ties_and_brackets_the_mean():
    reference = [1, 0, 0, 1, 0, 1, 0, 0, 1, 0]
    other = [1, 1, 1, 1, 0, 0, 1, 0, 1, 1]
    diff = paired_difference(reference, other)
    assert (diff.questions, diff.wins, diff.losses, diff.ties) == (10, 4, 1, 5)
    assert diff.mean_difference == pytest.approx(0.3)
    assert diff.low <= 0.3 <= diff.high and -1 <= diff.low < diff.high <= 1
    assert diff.p_value == pytest.approx(2 * (1 + 5) / 32)
    assert paired_difference(reference, reference).low == paired_difference(reference, reference).high == 0
    with pytest.raises(ValueError, match="same questions"):
        paired_difference([1, 0], [1])


def test_report_pairs_each_run_with_vanilla_on_the_same_questions(tmp_path):
    def run(name, method, accuracies, ids=("a", "b", "c", "d")):
        records = [line(id=qid, scores={"accuracy": acc, "em": acc * (qid != "a"), "f1": acc / 2})
                   for qid, acc in zip(ids, accuracies)]
        return LoadedRun(tmp_path / name, {}, run_metrics(method=method, label=name), records)

    vanilla = run("plain", "vanilla", [0, 1, 0, 0])
    better = run("ranked", "rankrag", [1, 1, 1, 0])
    elsewhere = run("other set", "rankrag", [1, 1, 1, 1], ids=("e", "f", "g", "h"))
    table = paired_table([vanilla, better, elsewhere])
    rows = [line for line in table.splitlines() if line.startswith("| ranked")]
    assert rows == ["| ranked | plain | 4 | 2/0/2 | +50.0 [+0.0, +100.0] | 0.50 | +25.0 [+0.0, +75.0] | 1.00 "
                    "| +25.0 [+0.0, +50.0] | 0.50 |"]
    # no vanilla run answered its questions: no row, and a note that says so
    assert not any(line.startswith("| other set") for line in table.splitlines())
    assert table.endswith("run vanilla with the same --seed and a --limit at least theirs): other set")
    assert paired_table([better, elsewhere]) is None


def test_report_pairs_a_shorter_run_with_a_longer_vanilla_run_on_the_shared_questions(tmp_path):
    def run(name, method, accuracies, ids):
        records = [line(id=qid, scores={"accuracy": acc, "em": acc, "f1": acc}) for qid, acc in zip(ids, accuracies)]
        return LoadedRun(tmp_path / name, {}, run_metrics(method=method, label=name), records)

    long_vanilla = run("plain", "vanilla", [0, 1, 0, 0, 1, 1], ids="abcdef")
    short = run("agents", "mainrag", [1, 1, 0], ids="cba")  # the seeded sample's first three, another order
    table = paired_table([long_vanilla, short])
    rows = [line for line in table.splitlines() if line.startswith("| agents")]
    # paired by question id: a 0→1 win, b 1→1 tie, c 0→0 tie; the questions d-f play no part
    assert rows[0].startswith("| agents | plain, on 3 of its 6 questions | 3 | 1/0/2 | +33.3 ")
    same_size = run("plain 3", "vanilla", [1, 1, 1], ids="abc")
    table = paired_table([long_vanilla, same_size, short])
    assert "| agents | plain 3 | 3 | 0/1/2 | -33.3 " in table  # the vanilla run on exactly its questions first


def test_report_names_reranking_stages_that_changed_nothing(tmp_path):
    from winnow.evaluation.report import unchanged_stages

    def question(qid, listwise_passthrough):
        return line(id=qid, stages=[{"stage": "retrieve", "kind": "bm25", "passthrough": False},
                                    {"stage": "listwise", "kind": "listwise", "passthrough": listwise_passthrough},
                                    {"stage": "generate", "kind": "reader", "passthrough": True}])

    idle = LoadedRun(tmp_path, {}, run_metrics(label="rankgpt m"), [question("a", True), question("b", True),
                                                                      question("c", False)])
    assert unchanged_stages(idle) == ["rankgpt m: listwise for 2 of 3 questions"]
    busy = LoadedRun(tmp_path, {}, run_metrics(label="rankgpt m"), [question("a", False), question("b", True),
                                                                      question("c", False)])
    assert unchanged_stages(busy) == []  # the reader never reorders and is not a reranking stage


def test_report_gives_the_command_of_the_session_that_last_extended_the_run(tmp_path):
    from winnow.evaluation.report import reproducing_command

    first, later = ["winnow", "eval", "--limit", "10"], ["winnow", "eval", "--limit", "20"]
    extended = {"command": first, "sessions": [{"limit": 10, "command": first}, {"limit": 20, "command": later}]}
    assert reproducing_command(LoadedRun(tmp_path, extended, run_metrics(), [])) == "`winnow eval --limit 20`"
    # Sessions written before they kept their command: the first command, and the limit reached.
    older = {"command": first, "sessions": [{"limit": 10}, {"limit": 20}]}
    assert reproducing_command(LoadedRun(tmp_path, older, run_metrics(), [])) == (
        "`winnow eval --limit 10` (its first session; a later one raised it to `--limit 20`)")
    single = {"command": first, "sessions": [{"limit": 10}]}
    assert reproducing_command(LoadedRun(tmp_path, single, run_metrics(), [])) == "`winnow eval --limit 10`"
    assert reproducing_command(LoadedRun(tmp_path, {}, run_metrics(), [])) == "`(not recorded)`"


def test_metric_rows_skip_passthrough_stages_and_carry_skipped_ones_forward():
    records = [
        # q1: the reranker moved the answer from rank 7 to rank 1.
        record("q1", [("retrieve", [7]), ("predict", [7], True), ("rerank", [1]), ("retrieve#2", [])],
               first=[7], final=[1], accuracy=1.0, seconds=2.0, calls=4),
        # q2: the reranker did not run; its list after "rerank" is the retrieved one (answer at 3).
        record("q2", [("retrieve", [3]), ("predict", [3], True)], first=[3], final=[], seconds=4.0, calls=2),
    ]
    records = [line(**r) for r in records]
    assert stage_labels(records) == ["retrieve", "rerank"]
    metrics = compute_metrics(records, selected=3, run=run_info(), depth=20)
    assert metrics.rows == ["first_stage", "retrieve", "rerank", "final"]
    assert metrics.answer_recall["first_stage"] == {"R@1": 0.0, "R@5": 0.5, "R@10": 1.0, "R@20": 1.0}
    assert metrics.answer_recall["rerank"] == {"R@1": 0.5, "R@5": 1.0, "R@10": 1.0, "R@20": 1.0}
    assert metrics.answer_recall["final"]["R@5"] == 0.5
    assert metrics.questions.to_json() == {"selected": 3, "answered": 2, "remaining": 1, "regex_answers": 0}
    assert metrics.answer.accuracy == 0.5
    cost = metrics.cost
    assert (cost.llm_calls, cost.cache_hits, cost.prompt_tokens) == (6, 2, 60)
    assert cost.llm_calls_per_question == 3 and cost.seconds_per_question == 3.0
    assert cost.without_cache is None  # their cache hits predate the count of what they first cost
    # Rounds are summed into their stage: q1's two retrieves cost 1.0 s, q2's one 0.5 s.
    assert metrics.stage_cost["retrieve"].seconds == pytest.approx(0.75)
    assert metrics.question_ids == ["q1", "q2"]


# --- real runs through the command line (SmolLM2-135M, a tiny BM25 index) -------------------------

CORPUS = [
    ("paris", "Paris", "Paris is the capital and most populous city of France."),
    ("france", "France", "France is a country in Western Europe whose capital is Paris."),
    ("lyon", "Lyon", "Lyon is the third-largest city of France, on the Rhone."),
    ("mona", "Mona Lisa", "The Mona Lisa is a portrait painted by Leonardo da Vinci."),
    ("louvre", "Louvre", "The Louvre in Paris houses the Mona Lisa."),
    ("jupiter", "Jupiter", "Jupiter is the largest planet in the Solar System."),
    ("saturn", "Saturn", "Saturn is the second-largest planet, known for its rings."),
    ("rome", "Rome", "Rome is the capital city of Italy."),
    ("italy", "Italy", "Italy is a country in Southern Europe; its capital is Rome."),
    ("nile", "Nile", "The Nile is a major river in northeastern Africa."),
]
QUESTIONS = [
    {"id": "q1", "question": "What is the capital of France?", "golden_answers": ["Paris"]},
    {"id": "q2", "question": "Who painted the Mona Lisa?", "golden_answers": ["Leonardo da Vinci", "Leonardo"]},
    {"id": "q3", "question": "What is the largest planet?", "golden_answers": ["Jupiter"]},
    {"id": "q4", "question": "What is the capital city of Italy?", "golden_answers": [r"R(o|O)me"],
     "metadata": {"answer_type": "regex"}},
]
QRELS = {"q1": {"paris": 1, "france": 1}, "q2": {"mona": 2, "louvre": 1}, "q3": {"jupiter": 1}, "q4": {"rome": 1}}


def winnow(*args, check=True, process=False):
    """``winnow ARGS`` in this process (tests/cli_runner.py), or in a subprocess of its own with ``process``."""
    if process:
        env = {**os.environ, "COLUMNS": "160"}
        result = subprocess.run([sys.executable, "-m", "winnow.cli", *map(str, args)], capture_output=True,
                                text=True, env=env, timeout=300)
    else:
        result = winnow_in_process(*args)
    if check and result.returncode != 0:
        raise AssertionError(f"winnow {' '.join(map(str, args))} failed ({result.returncode}):\n{result.stderr}")
    return result


def make_bench(folder, corpus, questions):
    """``folder/idx`` (a real BM25 index of ``corpus``) and ``folder/qa.jsonl`` (``questions``)."""
    source = folder / "corpus.jsonl"
    source.write_text("".join(json.dumps({"id": i, "title": t, "text": x}) + "\n" for i, t, x in corpus))
    build_bm25_index(load_corpus(source).passages, folder / "idx", source=str(source), source_checksum="tiny",
                     progress=False)
    (folder / "qa.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    return folder


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """A real BM25 index of ten passages, four questions (one with a regex answer) and their qrels."""
    folder = make_bench(tmp_path_factory.mktemp("eval-bench"), CORPUS, QUESTIONS)
    (folder / "qrels.txt").write_text("".join(f"{q} 0 {d} {g}\n" for q, docs in QRELS.items() for d, g in docs.items()))
    return folder


def eval_args(bench, out, *extra):
    return ("eval", "--index", bench / "idx", "--queries", bench / "qa.jsonl", "--model", MODEL,
            "--out", out, *extra)


def read_lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_default_batch_is_the_backends_parallelism():
    from winnow.evaluation.answering import default_batch_size

    assert default_batch_size("llama.cpp", None) == 1 and default_batch_size("llama.cpp", 4) == 4
    assert default_batch_size("transformers", None) == 8
    # A server: as many questions as calls in flight, so every stage can fill it; one flag sets both.
    assert default_batch_size("openai", None) == 64 and default_batch_size("openai", None, 256) == 256


@pytest.mark.llm
def test_eval_writes_answers_metrics_and_run_files_then_report(bench, tmp_path):
    rankrag = tmp_path / "rankrag"
    result = winnow(*eval_args(bench, rankrag, "--method", "rankrag", "--n", "4", "--k", "2", "--qrels",
                               bench / "qrels.txt"))
    assert "4 questions answered" in result.stderr and f"rankrag {MODEL} N=4 k=2" in result.stdout
    # llama.cpp in process decodes one sequence at a time: a batch of more questions would ask no
    # faster and lose all its work when stopped, so by default each question is its own batch.
    assert "4 questions, 0 already answered, 4 to ask in batches of 1" in result.stderr

    config = json.loads((rankrag / "config.json").read_text())
    assert config["identity"]["settings"]["n"] == 4 and config["identity"]["spec"]["method"] == "rankrag"
    assert config["models"]["model"]["sha256"] == resolve_model(MODEL, progress=False).sha256
    assert config["identity"]["queries"]["questions"] == 4 and config["versions"]["winnow"]

    records = read_lines(rankrag / "answers.jsonl")
    assert [r["id"] for r in records] == ["q1", "q2", "q3", "q4"]
    texts = {i: x for i, _, x in CORPUS}
    for r, q in zip(records, QUESTIONS):
        regex = bool(q.get("metadata"))
        # Scores and answer ranks agree with the metrics applied afresh to the stored lists.
        assert r["scores"]["accuracy"] == accuracy(r["answer"], q["golden_answers"], regex=regex)
        assert r["first_stage"]["answer_ranks"] == [
            rank for rank, pid in enumerate(r["first_stage"]["ids"], 1) if has_answer(texts[pid], q["golden_answers"],
                                                                                        regex=regex)]
        stages = {s["stage"]: s for s in r["stages"]}
        assert list(stages) == ["retrieve", "rerank", "generate"]
        # The reranker's whole order is kept; the answer was read from its top 2.
        assert sorted(stages["rerank"]["ids"]) == sorted(stages["retrieve"]["ids"])
        assert r["final"]["ids"] == stages["rerank"]["ids"][:2] and stages["generate"]["passthrough"]
        assert stages["rerank"]["usage"]["calls"] + stages["rerank"]["usage"]["cache_hits"] == len(
            stages["retrieve"]["ids"])

    metrics = json.loads((rankrag / "metrics.json").read_text())
    assert metrics["rows"] == ["first_stage", "retrieve", "rerank", "final"]
    assert metrics["answer"]["accuracy"] == pytest.approx(sum(r["scores"]["accuracy"] for r in records) / 4)
    assert metrics["answer_recall"]["first_stage"]["R@5"] == pytest.approx(
        sum(bool(r["first_stage"]["answer_ranks"]) for r in records) / 4)
    assert metrics["qrels"]["rows"]["first_stage"]["judged_questions"] == 4
    assert 0 < metrics["qrels"]["rows"]["rerank"]["nDCG@10"] <= 1
    assert metrics["cost"]["llm_calls"] + metrics["cost"]["cache_hits"] == sum(
        r["usage"]["calls"] + r["usage"]["cache_hits"] for r in records)
    run = read_run(rankrag / "runs" / "rerank.trec")
    assert [doc for doc, _ in run["q2"]] == next(s for s in records[1]["stages"] if s["stage"] == "rerank")["ids"]
    assert sorted(p.name for p in (rankrag / "runs").iterdir()) == [
        "final.trec", "first_stage.trec", "rerank.trec", "retrieve.trec"]

    # Another configuration in the same folder is refused before any model loads.
    refused = winnow(*eval_args(bench, rankrag, "--method", "rankrag", "--n", "3", "--k", "2"), check=False)
    assert refused.returncode == 2 and "another configuration" in refused.stderr and "settings.n: 4 → 3" in refused.stderr
    assert len(read_lines(rankrag / "answers.jsonl")) == 4

    mainrag = tmp_path / "mainrag"
    winnow(*eval_args(bench, mainrag, "--method", "mainrag", "--n", "4", "--limit", "2", "--seed", "1"))
    chosen = [r["id"] for r in read_lines(mainrag / "answers.jsonl")]
    assert len(chosen) == 2 and chosen == [i.id for i in select_questions(
        [qa_item(q["id"]) for q in QUESTIONS], limit=2, seed=1)]
    sessions = json.loads((mainrag / "config.json").read_text())["sessions"]
    assert sessions[-1]["command"][-4:] == ["--limit", "2", "--seed", "1"]
    report_md = tmp_path / "report" / "report.md"
    winnow("report", rankrag, mainrag, "--out", report_md, "--question", chosen[0])
    text = report_md.read_text()
    # Two question sets (all four, a seeded two), so two first-stage baseline rows.
    assert "*first stage: bm25 top-20 alone (question set 1)*" in text
    assert "*first stage: bm25 top-20 alone (question set 2)*" in text
    assert f"| rankrag {MODEL} N=4 k=2 (question set 1) | 4/4 |" in text
    assert f"| mainrag {MODEL} N=4 (question set 2) | 2/2 |" in text
    assert "| adaptive_bar |" in text and "nDCG@10" in text
    images = sorted(p.name for p in report_md.parent.glob("*.png"))
    assert images == ["report-answer-recall.png", f"report-judge-mainrag-{chosen[0]}.png"]
    for name in images:
        assert f"]({name})" in text
        assert (report_md.parent / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    missing = winnow("report", mainrag, "--out", tmp_path / "r2.md", "--question", "nope", check=False)
    assert missing.returncode == 2 and "nope" in missing.stderr


@pytest.mark.subprocess
@pytest.mark.llm
def test_a_killed_eval_resumes_without_losing_or_repeating_a_question(bench, tmp_path):
    out = tmp_path / "run"
    # No call cache, so every question costs real model time and the kill lands mid-run; one
    # question a batch, so answers are written one by one (a batch of all four lands at once).
    args = eval_args(bench, out, "--method", "rankrag", "--n", "6", "--k", "2", "--no-cache", "--batch-size", "1")
    process = subprocess.Popen([sys.executable, "-m", "winnow.cli", *map(str, args)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env=os.environ.copy())
    answers = out / "answers.jsonl"
    deadline = time.monotonic() + 120
    while not (answers.is_file() and answers.read_bytes().count(b"\n") >= 1):
        assert process.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    before = answers.read_bytes()
    finished_before = before.count(b"\n")
    assert 1 <= finished_before < 4
    # The kill may land between lines or inside one: make sure a torn line is there to recover from.
    with answers.open("ab") as stream:
        stream.write(b'{"id": "q4", "answer": "half')
    assert not (out / "metrics.json").exists()

    result = winnow(*args)
    assert "half-written last line" in result.stderr
    assert f"{finished_before} already answered, {4 - finished_before} to ask" in result.stderr
    after = answers.read_bytes()
    assert after.startswith(before)  # nothing answered before the kill was rewritten
    ids = [r["id"] for r in read_lines(answers)]
    assert ids == ["q1", "q2", "q3", "q4"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["questions"] == {"selected": 4, "answered": 4, "remaining": 0, "regex_answers": 1,
                                    "failed_this_session": 0}
    # A third run has nothing to ask: it loads no model and rewrites the same metrics.
    again = winnow(*args)
    assert "0 to ask" in again.stderr and answers.read_bytes() == after


@pytest.mark.llm
def test_a_question_the_backend_refuses_is_recorded_skipped_and_retried(tmp_path):
    # A real refusal: long passages are cut to fit, but a question is never cut, and a 6,000-word
    # question leaves no room in SmolLM2's 4,096-token context.
    source = tmp_path / "corpus.jsonl"
    source.write_text(json.dumps({"id": "long", "title": "Aardvark", "text": " ".join(["aardvark burrow termite"] * 2500)})
                      + "\n" + json.dumps({"id": "paris", "title": "Paris", "text": "Paris is the capital of France."})
                      + "\n")
    too_long = "where does the aardvark live " + "aardvark " * 6000
    build_bm25_index(load_corpus(source).passages, tmp_path / "idx", source=str(source), source_checksum="big",
                     progress=False)
    queries = tmp_path / "qa.jsonl"
    queries.write_text(json.dumps({"id": "a1", "question": too_long, "golden_answers": ["burrow"]})
                       + "\n" + json.dumps({"id": "a2", "question": "capital of France", "golden_answers": ["Paris"]})
                       + "\n")
    args = ("eval", "--index", tmp_path / "idx", "--queries", queries, "--model", MODEL, "--method", "vanilla",
            "--k", "1", "--out", tmp_path / "run")
    result = winnow(*args, check=False)
    assert result.returncode == 3, result.stderr  # finished, but a chosen question is unanswered: not a success
    assert "skipped a1" in result.stderr and "leaves no room for passage text" in result.stderr
    assert "1 of 2 question(s) remain unanswered (a1): 1 × " in " ".join(result.stderr.split())
    assert [r["id"] for r in read_lines(tmp_path / "run" / "answers.jsonl")] == ["a2"]
    assert [e["id"] for e in read_lines(tmp_path / "run" / "errors.jsonl")] == ["a1"]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["questions"]["remaining"] == 1 and metrics["questions"]["failed_this_session"] == 1
    again = winnow(*args, check=False)  # resuming retries it (and it fails again, recorded again)
    assert again.returncode == 3
    assert "1 already answered, 1 to ask" in again.stderr
    assert len(read_lines(tmp_path / "run" / "errors.jsonl")) == 2


@pytest.mark.llm
def test_eval_takes_the_fusion_weight_and_labels_the_run_with_it(bench, tmp_path):
    fused = tmp_path / "fused"
    result = winnow(*eval_args(bench, fused, "--method", "rankrag", "--n", "4", "--k", "2", "--limit", "2",
                               "--fusion-alpha", "0.5", "--max-answer-tokens", "8"))
    assert f"rankrag {MODEL} N=4 k=2 max_answer_tokens=8 α=0.5" in result.stdout
    metrics = json.loads((fused / "metrics.json").read_text())
    assert metrics["run"]["settings"]["fusion_alpha"] == 0.5 and metrics["run"]["settings"]["max_answer_tokens"] == 8
    for record in read_lines(fused / "answers.jsonl"):
        stages = {s["stage"]: s for s in record["stages"]}
        assert list(stages) == ["retrieve", "rerank", "fusion", "generate"]
        assert sorted(stages["rerank"]["ids"]) == sorted(stages["retrieve"]["ids"])  # every P(True) kept for the blend
        assert record["final"]["ids"] == stages["fusion"]["ids"][:2]
        assert record["usage"]["completion_tokens"] <= 8
    # The same run again in another folder: every call comes from the cache, and its cost had nothing
    # been cached is the first run's.
    again = tmp_path / "again"
    rerun = winnow(*eval_args(bench, again, "--method", "rankrag", "--n", "4", "--k", "2", "--limit", "2",
                              "--fusion-alpha", "0.5", "--max-answer-tokens", "8"))
    first, second = (json.loads((folder / "metrics.json").read_text())["cost"] for folder in (fused, again))
    assert second["llm_calls"] == 0 and second["cache_hits"] == first["llm_calls"] + first["cache_hits"]
    for name in ("llm_calls_per_question", "prompt_tokens_per_question", "completion_tokens_per_question"):
        assert second["without_cache"][name] == first["without_cache"][name] > 0
    assert second["without_cache"]["llm_seconds_per_question"] == pytest.approx(
        first["without_cache"]["llm_seconds_per_question"], abs=0.01)
    assert "without the cache:" in rerun.stderr
    # The weight is part of the run's identity: the paper's setting cannot resume into this folder.
    refused = winnow(*eval_args(bench, fused, "--method", "rankrag", "--n", "4", "--k", "2"), check=False)
    assert refused.returncode == 2 and "fusion_alpha: 0.5 → 0.0" in refused.stderr


def cached_choice_keys(cache_dir) -> set[str]:
    """The keys of the choice (P("True")) calls in the call cache at ``cache_dir``."""
    with sqlite3.connect(cache_dir / "llm-calls.sqlite") as db:
        return {key for (key,) in db.execute("SELECT key FROM llm_calls WHERE kind = 'choices'")}


def poison_cached_judgements(cache_dir, keep=frozenset()) -> int:
    """Turn the cached choice calls (except ``keep``) into what an older Winnow could leave behind:
    NaN log-probabilities under today's keys, each entry with a checksum that holds (an older Winnow
    wrote it whole; the checksum test for damage is tests/test_llm_cache.py's). Returns how many."""
    from winnow.llm.cache import entry_checksum

    with sqlite3.connect(cache_dir / "llm-calls.sqlite") as db:
        rows = [(key, response) for key, response in
                db.execute("SELECT key, response FROM llm_calls WHERE kind = 'choices'") if key not in keep]
        for key, response in rows:
            answer = json.loads(response)
            answer["logprobs"] = {choice: math.nan for choice in answer["logprobs"]}
            text = json.dumps(answer)
            db.execute("UPDATE llm_calls SET response = ?, checksum = ? WHERE key = ?",
                       (text, entry_checksum(key, "choices", text.encode("utf-8")), key))
    return len(rows)


@pytest.mark.llm
def test_eval_reasks_cached_answers_an_older_version_stored_unusable_and_says_so(bench, tmp_path, monkeypatch):
    monkeypatch.setenv("WINNOW_CACHE_DIR", str(tmp_path / "cache"))
    args = ("--method", "rankrag", "--n", "3", "--k", "1", "--limit", "1", "--max-answer-tokens", "4")
    first = winnow(*eval_args(bench, tmp_path / "first", *args))
    assert "call cache:" not in first.stderr
    poisoned = poison_cached_judgements(tmp_path / "cache")
    assert poisoned == 3
    again = winnow(*eval_args(bench, tmp_path / "again", *args))
    assert f"call cache: {poisoned} cached answer(s) written by an older Winnow were unusable" in again.stderr
    cost = json.loads((tmp_path / "again" / "metrics.json").read_text())["cost"]
    assert (cost["llm_calls"], cost["cache_hits"]) == (3, 1)  # the judgements asked again, the answer cached


@pytest.mark.llm
def test_qrels_outside_the_index_are_counted_and_runs_of_one_setting_get_distinct_labels(bench, tmp_path):
    qrels = tmp_path / "other-corpus.qrels"
    qrels.write_text("q1 0 paris 1\nq1 0 gone-1 1\nq2 0 gone-2 0\nq3 0 jupiter 1\nq9 0 gone-3 2\n")
    folders = [tmp_path / name for name in ("first", "second", "third")]
    result = winnow(*eval_args(bench, folders[0], "--method", "vanilla", "--limit", "2", "--qrels", qrels))
    # q1 and q2 are asked: of their judgements, only q1's on gone-1 is relevant and unknown.
    assert ("qrels: 3 of the 5 documents judged in the qrels are not in the index ('gone-1', 'gone-2', 'gone-3'); "
            "this run's questions have 1 relevant judgement on them, which no ranking can find") in result.stderr
    coverage = json.loads((folders[0] / "metrics.json").read_text())["qrels"]["index_coverage"]
    assert coverage == {"judged_documents": 5, "unknown_documents": 3, "unknown_examples": ["gone-1", "gone-2", "gone-3"],
                        "relevant_judgements_unknown": 1}
    clean = winnow(*eval_args(bench, folders[0], "--method", "vanilla", "--limit", "2", "--qrels", bench / "qrels.txt"))
    assert "qrels:" not in clean.stderr
    assert json.loads((folders[0] / "metrics.json").read_text())["qrels"]["index_coverage"]["unknown_documents"] == 0

    for folder in folders[1:]:  # the same settings again: the label names method, model and settings alike
        winnow(*eval_args(bench, folder, "--method", "vanilla", "--limit", "2"))
    report_md = tmp_path / "report.md"
    winnow("report", *folders, "--out", report_md)
    rows = [line.split(" | ")[0] for line in report_md.read_text().splitlines() if line.startswith("| vanilla")]
    assert rows[:3] == [f"| vanilla {MODEL} k=5 (first)", f"| vanilla {MODEL} k=5 (second)",
                        f"| vanilla {MODEL} k=5 (third)"]


def test_runs_of_one_setting_in_folders_of_one_name_are_told_apart_by_path(tmp_path):
    from winnow.evaluation.report import distinguish_labels

    def run(path, label):
        return LoadedRun(path, {}, run_metrics(label=label), [])

    same_name = [run(tmp_path / "a" / "run", "vanilla m k=5"), run(tmp_path / "b" / "run", "vanilla m k=5")]
    other = run(tmp_path / "c" / "run", "rankrag m N=20 k=5")
    distinguish_labels([*same_name, other])
    assert [r.label for r in same_name] == [f"vanilla m k=5 ({tmp_path / 'a' / 'run'})",
                                            f"vanilla m k=5 ({tmp_path / 'b' / 'run'})"]
    assert other.label == "rankrag m N=20 k=5"  # a label no other run shares is left alone
