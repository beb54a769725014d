"""The papers' benchmark files as downloaded (issue 29, item 5): small files in each real layout,
read into QA records that `winnow eval` scores with the papers' metrics."""

from __future__ import annotations

import json

import pytest

from winnow.answers import answer_scores
from winnow.datasets import load_dataset, read_qa_jsonl, write_qa_jsonl
from winnow.errors import InputError, WinnowError


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


# KILT (facebookresearch/KILT README): one record per line, answers and provenance in "output".
KILT_NQ = [
    {"id": "-4135209844918483842", "input": "who sings does he love me with reba",
     "output": [{"answer": "Linda Davis", "provenance": [{"wikipedia_id": "11525010", "title": "Does He Love You"}]},
                {"answer": "Linda Davis"}, {"answer": "Linda Kaye Davis"}, {"provenance": []}],
     "meta": {}},
    {"id": "test-1", "input": "an unanswered test question"},  # KILT test files carry no output
]
KILT_FEVER = [
    {"id": 33078, "input": "The Boston Celtics play their home games at TD Garden.",
     "output": [{"answer": "SUPPORTS", "provenance": [{"wikipedia_id": "43376"}]}]},
    {"id": 1, "input": "Nikolaj Coster-Waldau worked with the Fox Broadcasting Company.",
     "output": [{"answer": "REFUTES"}, {"answer": "REFUTES"}]},
]


def test_kilt_files_keep_every_distinct_answer_and_the_provenance(tmp_path):
    dataset = load_dataset(f"kilt:{write_jsonl(tmp_path / 'nq-dev-kilt.jsonl', KILT_NQ)}")
    first, test = dataset.questions
    assert (first.id, first.question) == ("-4135209844918483842", "who sings does he love me with reba")
    assert first.golden_answers == ["Linda Davis", "Linda Kaye Davis"]
    assert first.metadata == {"dataset": "nq-dev-kilt", "provenance": ["11525010"]}
    assert test.golden_answers == []


def test_kilt_fever_labels_become_true_and_false_and_score_by_the_stated_label(tmp_path):
    dataset = load_dataset(f"kilt:{write_jsonl(tmp_path / 'fever-dev-kilt.jsonl', KILT_FEVER)}")
    supports, refutes = dataset.questions
    assert (supports.id, supports.golden_answers, refutes.golden_answers) == ("33078", ["True"], ["False"])
    assert answer_scores("True.", supports.golden_answers)["accuracy"] == 1.0
    assert answer_scores("Untrue", supports.golden_answers)["accuracy"] == 0.0


def test_a_broken_kilt_line_names_the_file_line_and_field(tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl", [KILT_NQ[0], {"id": "2", "output": []}])
    with pytest.raises(InputError, match=r"x.jsonl.*line 2.*input"):
        load_dataset(f"kilt:{path}")


# ASQA's own file (google-research/language, asqa): splits of {sample_id: record}.
ASQA_RECORD = {
    "ambiguous_question": "Who played bonnie in gone with the wind?",
    "qa_pairs": [{"context": "…", "question": "Who played Bonnie in the 1939 film?",
                  "short_answers": ["Cammie King", "Eleanor Cammack King"], "wikipage": "Cammie King"},
                 {"context": "…", "question": "Who played Bonnie as an infant?", "short_answers": ["Mary Anderson"],
                  "wikipage": None}],
    "wikipages": [],
    "annotations": [{"knowledge": [], "long_answer": "Cammie King played Bonnie Blue Butler in the 1939 film."},
                    {"knowledge": [], "long_answer": "Bonnie was played by Cammie King."}],
    "sample_id": "-7141127534883434358",
}


def test_asqa_keeps_sub_questions_and_long_answers_for_str_em_and_rouge(tmp_path):
    path = tmp_path / "ASQA.json"
    path.write_text(json.dumps({"train": {}, "dev": {ASQA_RECORD["sample_id"]: ASQA_RECORD}}))
    [item] = load_dataset(f"asqa:{path}").questions
    assert item.id == "-7141127534883434358" and item.question == "Who played bonnie in gone with the wind?"
    assert item.metadata["qa_pairs"] == [["Cammie King", "Eleanor Cammack King"], ["Mary Anderson"]]
    assert item.golden_answers == ["Cammie King", "Eleanor Cammack King", "Mary Anderson"]
    assert item.metadata["long_answers"][0] == "Cammie King played Bonnie Blue Butler in the 1939 film."
    # str-em here; ROUGE-L of the long answers is tested in test_paper_metrics.py (its import takes seconds).
    short_only = {k: v for k, v in item.metadata.items() if k != "long_answers"}
    scores = answer_scores("Bonnie was played by Cammie King in the 1939 film.", item.golden_answers,
                           metadata=short_only)
    assert scores["str_em"] == 0.5
    with pytest.raises(InputError, match="no split 'test'"):
        load_dataset(f"asqa:{path}#test")


def test_asqa_from_alce_s_evaluation_list(tmp_path):
    alce = {**{k: v for k, v in ASQA_RECORD.items() if k != "ambiguous_question"},
            "question": ASQA_RECORD["ambiguous_question"], "answer": "…", "docs": []}
    path = tmp_path / "asqa_eval_gtr_top100.json"
    path.write_text(json.dumps([alce]))
    [item] = load_dataset(f"asqa:{path}").questions
    assert item.metadata["long_answers"][1] == "Bonnie was played by Cammie King."


# ARC (allenai): the AI2 JSONL layout, and the same records with column-style choices.
ARC_OPTIONS = ["Planetary density will decrease.", "Planetary years will become longer.",
               "Planetary days will become shorter.", "Planetary gravity will become stronger."]
ARC_AI2 = {"id": "Mercury_7175875",
           "question": {"stem": "An astronomer observes that a planet rotates faster after a meteorite impact. "
                                "Which is the most likely effect?",
                        "choices": [{"text": text, "label": label}
                                    for text, label in zip(ARC_OPTIONS, "ABCD", strict=True)]},
           "answerKey": "C"}
ARC_COLUMNS = {"id": "NYSEDREGENTS_2015_4_8", "question": "Which is a renewable resource?",
               "choices": {"text": ["coal", "oil", "wind", "natural gas"], "label": ["1", "2", "3", "4"]},
               "answerKey": "3"}


def test_arc_questions_show_their_options_and_score_by_the_chosen_letter(tmp_path):
    dataset = load_dataset(f"arc:{write_jsonl(tmp_path / 'ARC-Challenge-Test.jsonl', [ARC_AI2, ARC_COLUMNS])}")
    planet, renewable = dataset.questions
    assert planet.question.endswith("\nA. Planetary density will decrease.\nB. Planetary years will become longer."
                                    "\nC. Planetary days will become shorter.\nD. Planetary gravity will become "
                                    "stronger.")
    assert planet.golden_answers == ["C"] and list(planet.metadata["choices"]) == ["A", "B", "C", "D"]
    assert renewable.metadata["choices"]["3"] == "wind" and renewable.golden_answers == ["3"]
    assert answer_scores("Answer: C", planet.golden_answers, metadata=planet.metadata)["accuracy"] == 1.0
    assert answer_scores("3", renewable.golden_answers, metadata=renewable.metadata)["accuracy"] == 1.0
    bad = write_jsonl(tmp_path / "bad.jsonl", [{**ARC_AI2, "answerKey": "E"}])
    with pytest.raises(InputError, match="answerKey 'E' is not one of the choices"):
        load_dataset(f"arc:{bad}")


# MIRAGE (Teddy-XiongGZ/MIRAGE): benchmark.json, {set: {id: {"question", "options", "answer"}}}.
MIRAGE = {
    "medqa": {"0000": {"question": "A 23-year-old woman presents with … Which is the most likely cause?",
                       "options": {"A": "Ampicillin", "B": "Ceftriaxone", "C": "Doxycycline", "D": "Nitrofurantoin"},
                       "answer": "D"}},
    "pubmedqa": {"25429730": {"question": "Are group 2 innate lymphoid cells increased in chronic rhinosinusitis?",
                              "options": {"A": "yes", "B": "no", "C": "maybe"}, "answer": "A"}},
}


def test_mirage_reads_one_set_or_all_and_round_trips_through_qa_jsonl(tmp_path):
    path = tmp_path / "benchmark.json"
    path.write_text(json.dumps(MIRAGE))
    both = load_dataset(f"mirage:{path}").questions
    assert [q.id for q in both] == ["medqa-0000", "pubmedqa-25429730"]
    [pubmed] = load_dataset(f"mirage:{path}#pubmedqa").questions
    assert pubmed.metadata == {"dataset": "mirage/pubmedqa", "choices": {"A": "yes", "B": "no", "C": "maybe"}}
    assert pubmed.question.endswith("?\nA. yes\nB. no\nC. maybe")
    write_qa_jsonl(both, tmp_path / "mirage.jsonl")
    assert read_qa_jsonl(tmp_path / "mirage.jsonl") == both
    with pytest.raises(InputError, match="no set 'mmlu'"):
        load_dataset(f"mirage:{path}#mmlu")


# PopQA (AlexTMallen/adaptive-retrieval): a TSV whose list fields are JSON in CSV quoting.
POPQA_TSV = (
    "id\tsubj\tprop\tobj\tsubj_id\tprop_id\tobj_id\ts_aliases\to_aliases\ts_uri\to_uri\ts_wiki_title\t"
    "o_wiki_title\ts_pop\to_pop\tquestion\tpossible_answers\n"
    "4222362\tGeorge Rankin\toccupation\tpolitician\t1850297\t22\t2834605\t\"[\"\"George James Rankin\"\"]\"\t"
    "\"[\"\"political leader\"\"]\"\thttp://www.wikidata.org/entity/Q5543720\thttp://www.wikidata.org/entity/Q82955\t"
    "George Rankin\tPolitician\t142\t25692\tWhat is George Rankin's occupation?\t"
    "\"[\"\"politician\"\", \"\"political leader\"\"]\"\n"
    "153080\tJohn Mayne\toccupation\tjournalist\t1\t22\t2\t[]\t[]\tu\tu\tJohn Mayne\tJournalist\t99\t3\t"
    "What is John Mayne's occupation?\t\"[\"\"journalist\"\", \"\"journo\"\"]\"\n"
)


def test_popqa_and_its_long_tail_cut(tmp_path):
    path = tmp_path / "popQA.tsv"
    path.write_text(POPQA_TSV, encoding="utf-8")
    everything = load_dataset(f"popqa:{path}")
    assert [q.id for q in everything.questions] == ["4222362", "153080"]
    assert everything.questions[0].golden_answers == ["politician", "political leader"]
    assert everything.questions[0].metadata == {"dataset": "popqa", "s_pop": 142}
    tail = load_dataset(f"popqa-longtail:{path}")
    assert [q.id for q in tail.questions] == ["153080"]  # s_pop 99 < 100; 142 is left out and counted
    assert "1 of 2 questions; 1 more popular ones left out" in tail.source


def test_a_missing_file_and_a_file_of_another_layout_are_named(tmp_path):
    with pytest.raises(WinnowError, match="no such file"):
        load_dataset(f"kilt:{tmp_path / 'absent.jsonl'}")
    path = write_jsonl(tmp_path / "arc.jsonl", [ARC_AI2])
    with pytest.raises(InputError, match="input"):
        load_dataset(f"kilt:{path}")


TWOWIKI = [
    {"_id": "8813f87c0bdd11eba7f7acde48001122", "type": "compositional",
     "question": "Who is the mother of the director of film Polish-Russian War?", "answer": "Małgorzata Braunek",
     "supporting_facts": [["Polish-Russian War (film)", 1], ["Xawery Żuławski", 2]], "context": []},
    {"_id": "5811079c0bdd11eba7f7acde48001122", "type": "comparison",
     "question": "Which film came out first, Blind Shaft or The Mask Of Fu Manchu?",
     "answer": "The Mask Of Fu Manchu", "supporting_facts": [["Blind Shaft", 0], ["The Mask of Fu Manchu", 0]]},
]


def test_2wikimultihopqa_dev_json_is_read_with_its_type_and_supporting_titles(tmp_path):
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(TWOWIKI, ensure_ascii=False))
    dataset = load_dataset(f"2wiki:{path}")
    first, second = dataset.questions
    assert (first.id, first.golden_answers) == ("8813f87c0bdd11eba7f7acde48001122", ["Małgorzata Braunek"])
    assert first.metadata["type"] == "compositional"
    assert first.metadata["supporting_titles"] == ["Polish-Russian War (film)", "Xawery Żuławski"]
    assert second.question.startswith("Which film came out first")
    assert answer_scores("It was The Mask of Fu Manchu.", second.golden_answers)["em"] == 0.0
    assert answer_scores("The Mask Of Fu Manchu", second.golden_answers)["em"] == 1.0


@pytest.mark.parametrize("content, message", [
    ('{"data": []}', "expected a JSON list of questions"),
    ('[{"question": "q?", "answer": "a"}]', "question 1: missing _id"),
    ('[{"_id": "x", "question": "q?", "answer": ""}]', "question 1: answer must be a non-empty string"),
])
def test_a_malformed_2wiki_file_is_refused_naming_the_question(tmp_path, content, message):
    path = tmp_path / "dev.json"
    path.write_text(content)
    with pytest.raises(InputError, match=message):
        load_dataset(f"2wiki:{path}")
