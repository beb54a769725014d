"""RankRAG's conversational benchmarks as downloaded (issue 29, item 5): TopiOCQA, INSCIT and
Doc2Dial in their own layouts, read into questions with their dialogue's earlier turns as history."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from winnow.cli import app
from winnow.datasets import load_dataset, read_qa_jsonl
from winnow.errors import InputError
from winnow.records import Turn


def write_json(path, data):
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def turns(*texts):
    return tuple(Turn("user" if i % 2 == 0 else "assistant", text) for i, text in enumerate(texts))


# TopiOCQA (McGill-NLP/topiocqa; the HF copy's fields): a list of turns, Context the earlier q/a.
TOPIOCQA = [
    {"Conversation_no": 1, "Turn_no": 1, "Question": "who painted the mona lisa", "Answer": "Leonardo da Vinci",
     "Topic": "Mona Lisa", "Topic_section": "Introduction", "Rationale": "", "is_nq": False,
     "Context": [], "Additional_answers": [{"Answer": "da Vinci", "Topic": "Mona Lisa"}],
     "Gold_passage": {"id": "wiki:1", "title": "Mona Lisa", "text": "The Mona Lisa is a portrait by Leonardo."}},
    {"Conversation_no": 1, "Turn_no": 2, "Question": "when was it painted", "Answer": "between 1503 and 1519",
     "Context": ["who painted the mona lisa", "Leonardo da Vinci"], "Additional_answers": [],
     "Gold_passage": {"id": "wiki:2", "title": "Mona Lisa", "text": "..."}},
]

# INSCIT (ellenmellon/INSCIT README): conversations of turns; context ends with the question.
INSCIT = {
    "Miracle on Ice": {"turns": [
        {"context": ["Who scored the winning goal for Miracle on Ice?"], "prevEvidence": [],
         "labels": [{"responseType": "directAnswer", "response": "Mike Eruzione scored it.",
                     "evidence": [{"passage_id": "Miracle on Ice:22", "passage_text": "...",
                                   "passage_titles": ["Miracle on Ice", "Game summary"]}]},
                    {"responseType": "directAnswer", "response": "Eruzione.", "evidence": []}]},
        {"context": ["Who scored the winning goal for Miracle on Ice?", "Mike Eruzione scored it.",
                     "Did anything else happen in the remaining 10 minutes?"], "prevEvidence": [],
         "labels": [{"responseType": "directAnswer", "response": "The Soviets attacked ferociously.",
                     "evidence": []}]},
        {"context": ["Who scored?", "Eruzione.", "Thanks!"], "labels": []},  # nothing to score: counted
    ], "seedArticle": {"title": "Miracle on Ice"}},
}

# Doc2Dial (doc2dial_dial_validation.json): dial_data -> domain -> doc_id -> dialogues.
DOC2DIAL = {"dial_data": {"dmv": {"Top 5 DMV Mistakes#1_0": [
    {"dial_id": "d1", "doc_id": "Top 5 DMV Mistakes#1_0", "domain": "dmv", "turns": [
        {"turn_id": 1, "role": "user", "da": "query_condition", "references": [{"sp_id": "4", "label": "precondition"}],
         "utterance": "Hello, I forgot to update my address."},
        {"turn_id": 2, "role": "user", "da": "query_condition", "references": [], "utterance": "Can you help?"},
        {"turn_id": 3, "role": "agent", "da": "respond_solution", "references": [{"sp_id": "6", "label": "solution"}],
         "utterance": "You can update it online."},
        {"turn_id": 4, "role": "user", "da": "query_solution", "references": [], "utterance": "How long does it take?"},
        {"turn_id": 5, "role": "agent", "da": "respond_solution", "references": [], "utterance": "About 10 days."},
        {"turn_id": 6, "role": "user", "da": "query_solution", "references": [], "utterance": "Thanks."},
    ]}]}}}


def test_topiocqa_turns_carry_their_context_as_history_and_every_answer(tmp_path):
    dataset = load_dataset(f"topiocqa:{write_json(tmp_path / 'topiocqa_dev.json', TOPIOCQA)}")
    first, second = dataset.questions
    assert (first.id, first.question, first.history) == ("1_1", "who painted the mona lisa", ())
    assert first.golden_answers == ["Leonardo da Vinci", "da Vinci"]
    assert (second.id, second.golden_answers) == ("1_2", ["between 1503 and 1519"])
    assert second.history == turns("who painted the mona lisa", "Leonardo da Vinci")
    assert second.metadata == {"dataset": "topiocqa", "conversation": 1, "turn": 2, "gold_title": "Mona Lisa"}
    # The history survives Winnow's QA JSONL, which `winnow eval --queries` reads.
    out = tmp_path / "topiocqa.jsonl"
    result = CliRunner().invoke(app, ["data", "export", f"topiocqa:{tmp_path / 'topiocqa_dev.json'}", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert read_qa_jsonl(out)[1].history == second.history


def test_inscit_answers_are_every_annotated_response_and_unlabelled_turns_are_counted(tmp_path):
    dataset = load_dataset(f"inscit:{write_json(tmp_path / 'dev.json', INSCIT)}")
    assert [q.id for q in dataset.questions] == ["Miracle on Ice_1", "Miracle on Ice_2"]
    first, second = dataset.questions
    assert first.golden_answers == ["Mike Eruzione scored it.", "Eruzione."] and first.history == ()
    assert second.question == "Did anything else happen in the remaining 10 minutes?"
    assert second.history == turns("Who scored the winning goal for Miracle on Ice?", "Mike Eruzione scored it.")
    assert "2 questions; 1 turns without an annotated response" in dataset.source


def test_doc2dial_user_turns_answered_by_the_agent_become_questions(tmp_path):
    dataset = load_dataset(f"doc2dial:{write_json(tmp_path / 'doc2dial_dial_validation.json', DOC2DIAL)}")
    first, second = dataset.questions
    # Two user turns in a row are one turn; the agent's next turn is the answer.
    assert (first.id, first.question, first.golden_answers) == (
        "d1_2", "Hello, I forgot to update my address. Can you help?", ["You can update it online."])
    assert first.history == () and first.metadata["doc_id"] == "Top 5 DMV Mistakes#1_0"
    assert (second.id, second.question, second.golden_answers) == ("d1_4", "How long does it take?",
                                                                    ["About 10 days."])
    assert second.history == turns("Hello, I forgot to update my address. Can you help?", "You can update it online.")
    assert "1 runs of turns by one speaker joined into one turn" in dataset.source
    assert "1 user turns no agent turn answers" in dataset.source  # the closing "Thanks."
    # MultiDoc2Dial lists a domain's dialogues directly.
    multi = {"dial_data": {"dmv": DOC2DIAL["dial_data"]["dmv"]["Top 5 DMV Mistakes#1_0"]}}
    again = load_dataset(f"doc2dial:{write_json(tmp_path / 'multidoc2dial_dial_validation.json', multi)}")
    assert [q.id for q in again.questions] == ["d1_2", "d1_4"]


@pytest.mark.parametrize("layout, data, message", [
    ("topiocqa", [{**TOPIOCQA[1], "Context": ["who painted the mona lisa"]}],
     r"\[0\] \(conversation 1, turn 2\): Context: history\[0\] is the user's"),
    ("topiocqa", [{**TOPIOCQA[0], "Question": ""}], r"\[0\] \(conversation 1, turn 1\): Question must be"),
    ("inscit", {"c": {"turns": [{"context": ["q"], "labels": [{"response": 3}]}]}},
     r"conversation 'c', turn 1, label 0: response must be"),
    ("doc2dial", {"dial_data": {"dmv": {"doc": [{"dial_id": "d9", "turns": [{"role": "bot", "utterance": "hi"}]}]}}},
     r"dialogue d9, turns\[0\]: role must be \"user\" or \"agent\", got 'bot'"),
    ("doc2dial", {"dialogues": []}, "no dial_data"),
])
def test_a_bad_record_names_the_file_record_and_field(tmp_path, layout, data, message):
    path = write_json(tmp_path / f"{layout}.json", data)
    with pytest.raises(InputError, match=message) as caught:
        load_dataset(f"{layout}:{path}")
    assert str(path) in str(caught.value)
