"""Train as you evaluate (RankRAG App. C and D): `winnow train sft --framing` renders examples in the
framing evaluation prompts in, records it with the model, and a run in the other framing is refused.

No model is trained or loaded here: the rendering is text, the check reads a written model record
(tests/test_training.py tokenises and trains)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from winnow.cli import app
from winnow.errors import InputError
from winnow.models.loading import MODEL_RECORD, check_trained_framing, locate_model, trained_framing
from winnow.prompts import plain_layout, prompt, task_prompt
from winnow.records import Passage, Turn
from winnow.settings import SettingError
from winnow.training import examples as ex
from winnow.training.presets import PRESETS
from winnow.training.sft import SFTSettings, read_blend

MONA = Passage("m", "The Mona Lisa is a portrait by Leonardo da Vinci.", "Mona Lisa")
BANANA = Passage("b", "A banana is an edible fruit.", "Banana")
SYSTEM = prompt("rankrag.context_ranking").system

# App. C/D's layout of a context-ranking example and its target, byte for byte.
RANKING_PLAIN = (
    f"System: {SYSTEM}\n\n"
    "Passage: Mona Lisa The Mona Lisa is a portrait by Leonardo da Vinci.\n\n"  # one line, as Tables 10-11 print it
    "User: For the question who painted the mona lisa, access whether the passage is relevant to the question. "
    "Return True if relevant, otherwise False.\n\n"
    "Assistant: True")


def test_plain_training_text_is_what_evaluation_sends_followed_by_the_target():
    example = ex.context_ranking("ranking", "who painted the mona lisa", MONA, True)
    prompt_text, completion = ex.plain_example(example.messages, example.context_chars)
    # Evaluation's rankrag prompt in the plain framing (--profile paper), the same function's text.
    evaluated = task_prompt("rankrag.context_ranking", "qa").render("who painted the mona lisa", [MONA],
                                                                    framing="plain")
    assert prompt_text == evaluated and prompt_text.endswith("\n\nAssistant:")
    assert prompt_text + completion == RANKING_PLAIN == ex.render_plain(example.messages, example.context_chars)
    # The chat framing's example is the chat turns evaluation sends, the target last.
    chat = task_prompt("rankrag.context_ranking", "qa").render("who painted the mona lisa", [MONA], framing="chat")
    assert example.messages == [*chat, {"role": "assistant", "content": "True"}]


def test_plain_training_text_of_five_passages_and_of_a_dialogue():
    rag = ex.rag_qa("rag", "who painted the mona lisa", [BANANA, MONA], "Leonardo da Vinci", wording="inference")
    evaluated = prompt("rankrag.rag").render_plain("who painted the mona lisa", [BANANA, MONA])
    assert ex.plain_example(rag.messages, rag.context_chars) == (evaluated, " Leonardo da Vinci")
    history = [{"role": "user", "content": "who painted the mona lisa"},
               {"role": "assistant", "content": "Leonardo"}]
    qa = ex.context_qa("conv", "when was it painted", Passage("d", "Painted in 1503.", "Mona Lisa"), "1503",
                       history=history)
    template = replace(prompt("rankrag_train.context_qa_short"), dialogue=True)
    turns = [Turn(t["role"], t["content"]) for t in history]
    prompt_text, completion = ex.plain_example(qa.messages, qa.context_chars)
    assert prompt_text == template.render_plain("when was it painted", [qa_passage := Passage("d", "Painted in 1503.",
                                                                                              "Mona Lisa")], turns)
    assert prompt_text.split("\n\n")[1:4] == [f"Passage: {qa_passage.title} {qa_passage.text}",
                                              "User: who painted the mona lisa", "Assistant: Leonardo"]
    assert completion == " 1503"
    # Stage-I chat data has no context: every turn is a block.
    assert plain_layout([{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}]) == \
        "System: S\n\nUser: hi\n\nAssistant:"


def write_rows(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_a_blend_row_says_where_its_context_ends_and_an_older_one_is_refused_in_plain(tmp_path):
    example = ex.context_ranking("ranking", "who painted the mona lisa", MONA, True)
    row = {**example.to_dict("ranking:0"), "kind": "ranking"}
    assert row["context_chars"] == len("Passage: Mona Lisa\nThe Mona Lisa is a portrait by Leonardo da Vinci.")
    older = {key: value for key, value in row.items() if key != "context_chars"}
    chat_data = {"id": "sft:0", "kind": "sft", "messages": [{"role": "user", "content": "hi"},
                                                            {"role": "assistant", "content": "hello"}]}
    path = write_rows(tmp_path / "train.jsonl", [row, chat_data, older])
    assert len(read_blend(path)) == 3  # the chat framing does not need it
    with pytest.raises(InputError) as caught:
        read_blend(path, framing="plain")
    message = str(caught.value)
    assert "train.jsonl" in message and "line 3" in message and "context_chars" in message
    assert "winnow train blend" in message
    write_rows(path, [{**row, "context_chars": -1}])
    with pytest.raises(InputError, match="context_chars"):
        read_blend(path)


def test_the_paper_presets_train_plain_and_the_framing_is_a_checked_setting():
    assert {p.values["framing"] for p in PRESETS.values()} == {"plain"}
    assert SFTSettings(base="b", data="d", out="o").framing == "chat"
    with pytest.raises(SettingError) as caught:
        SFTSettings(base="b", data="d", out="o", framing="markdown").check()
    assert caught.value.setting == "framing"
    result = CliRunner().invoke(app, ["train", "sft", "--base", "b", "--data", "d", "--out", "o",
                                      "--framing", "markdown"])
    assert isinstance(result.exception, SettingError)
    assert "--framing" in str(result.exception) and "markdown" in str(result.exception)


def trained_model(folder: Path, record: dict) -> Path:
    """A `winnow train sft` output as evaluation finds it: model/ with its record (no weights needed
    to locate it)."""
    model = folder / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"model_type": "llama"}', encoding="utf-8")
    (model / MODEL_RECORD).write_text(json.dumps({"format": 1, "finetune": "full", **record}), encoding="utf-8")
    return folder


def test_a_model_is_evaluated_in_the_framing_it_was_trained_in(tmp_path):
    plain = locate_model(str(trained_model(tmp_path / "plain-run", {"framing": "plain"})))
    older = locate_model(str(trained_model(tmp_path / "old-run", {})))  # recorded before --framing: chat
    assert (trained_framing(plain), trained_framing(older)) == ("plain", "chat")
    both = ("chat", "plain")
    assert check_trained_framing("rankrag", "plain", both, {"default": plain}) == []
    with pytest.raises(SettingError) as caught:
        check_trained_framing("rankrag", "chat", both, {"default": plain})
    assert caught.value.setting == "framing"
    text = f"{caught.value.message} {caught.value.hint}"
    assert "plain-run" in text and "plain framing" in text and "chat framing" in text
    assert "--framing plain" in text
    # --profile paper (plain) with a model trained on chat turns.
    with pytest.raises(SettingError, match="--framing chat"):
        check_trained_framing("rankrag", "plain", both, {"default": older})
    # A method with chat prompts only cannot follow the model: said, not refused.
    [notice] = check_trained_framing("mainrag", "chat", ("chat",), {"default": older, "judge": plain})
    assert "role judge" in notice and "plain framing" in notice
    # Models Winnow did not train (and backends without a source) are not checked.
    assert check_trained_framing("rankrag", "chat", both, {"default": None}) == []
