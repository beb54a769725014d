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


# --- the framing across the process boundary: a converted GGUF, a model a server serves --------------

def tiny_gguf(path: Path, framing: str | None = None) -> Path:
    """A GGUF holding metadata only (no tensors): what the framing readers look at."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    if framing is not None:
        writer.add_string("winnow.framing", framing)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_an_exported_gguf_carries_the_framing_it_was_trained_in(tmp_path):
    from winnow.models.loading import carried_record, export_record_path

    run = trained_model(tmp_path / "plain-run", {"framing": "plain"})
    converted = tiny_gguf(tmp_path / "rankrag-8b.gguf")
    assert carried_record(converted) is None  # converted by hand: nothing says how it was trained
    result = CliRunner().invoke(app, ["train", "export", str(run), str(converted)])
    assert result.exit_code == 0, result.output
    sidecar = export_record_path(converted)
    assert sidecar.name == "rankrag-8b.gguf.winnow-model.json" and json.loads(sidecar.read_text())["framing"] == "plain"
    source = locate_model(str(converted))
    assert trained_framing(source) == "plain"
    with pytest.raises(SettingError, match="--framing plain"):
        check_trained_framing("rankrag", "chat", ("chat", "plain"), {"default": source})
    # A converter that writes the GGUF key instead of the sidecar is read the same way.
    keyed = tiny_gguf(tmp_path / "keyed.gguf", framing="chat")
    assert carried_record(keyed)["framing"] == "chat"
    # Not a training output: refused naming it.
    refused = CliRunner().invoke(app, ["train", "export", str(tmp_path), str(converted)])
    assert refused.exit_code != 0 and "not a `winnow train sft` output" in str(refused.exception)


def served_rankrag(server, index, framing):
    from winnow.llm import LLM
    from winnow.llm.openai_http import OpenAICompatibleBackend
    from winnow.methods import build_method

    backend = OpenAICompatibleBackend("m", base_url=server.url)
    return build_method("rankrag", index=index, llm=LLM(backend), framing=framing)


def test_a_served_model_is_checked_against_the_record_of_the_folder_it_was_loaded_from(tmp_path, index):
    """vLLM names the folder it loaded as the model's root in GET /v1/models: the framing check that
    holds in process holds across the server too."""
    from fakes import ScriptedServer

    server = ScriptedServer(delay=0.0)
    server.models_root = str(trained_model(tmp_path / "plain-run", {"framing": "plain"}) / "model")
    try:
        with pytest.raises(SettingError, match="--framing plain"):
            served_rankrag(server, index, "chat")
        assert served_rankrag(server, index, "plain").notices == []
    finally:
        server.stop()


def test_a_server_that_cannot_say_what_it_serves_is_noted_once(index):
    from fakes import ScriptedServer

    from winnow.llm import LLM
    from winnow.llm.openai_http import OpenAICompatibleBackend
    from winnow.methods import build_method

    server = ScriptedServer(delay=0.0)  # GET /v1/models answers 404
    try:
        llm = LLM(OpenAICompatibleBackend("m", base_url=server.url))
        with pytest.warns(Warning, match="does not say which model it serves"):
            first = build_method("rankrag", index=index, llm=llm)
        second = build_method("vanilla", index=index, llm=llm)
        assert len(first.notices) == 1 and "framing model m was trained in is not checked" in first.notices[0]
        assert second.notices == []  # once per backend
        server.models_root = "/nowhere/rankrag-8b"  # named, but not a path this machine can read
        with pytest.warns(Warning, match="cannot read"):
            build_method("rankrag", index=index, llm=LLM(OpenAICompatibleBackend("m", base_url=server.url)))
    finally:
        server.stop()
