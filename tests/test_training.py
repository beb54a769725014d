"""RankRAG instruction tuning: the Stage-II blend, fine-tuning SmolLM2-135M for a few real steps,
resuming from a checkpoint, and the transformers backend against llama.cpp on the same model."""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import winnow as winnow_in_process

from winnow.cores import available_cores
from winnow.corpus import load_corpus
from winnow.errors import InputError, WinnowError
from winnow.index import BM25Index, build_bm25_index
from winnow.prompts import prompt
from winnow.records import Passage
from winnow.settings import SettingError
from winnow.training.blend import build_blend, component_counts
from winnow.training.pseudo_relevance import label_chunks, ngram_recall, word_chunks

pytest.importorskip("torch")

CAPITALS = {"spain": "Madrid", "italy": "Rome", "france": "Paris", "germany": "Berlin", "japan": "Tokyo",
            "egypt": "Cairo", "peru": "Lima", "kenya": "Nairobi"}
SYSTEM = prompt("rankrag.context_ranking").system


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module", autouse=True)
def module_cache_dir(tmp_path_factory):
    """The isolated cache of conftest.py, set for this module's module-scoped fixtures too (they run
    before function-scoped ones), so the model is dequantised once, and never into the user's cache."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WINNOW_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "winnow-cache"))
        yield


@pytest.fixture(scope="module")
def capitals(tmp_path_factory):
    """A real BM25 index of eight capital-city passages and two distractors, and dev questions on it."""
    folder = tmp_path_factory.mktemp("capitals")
    passages = [{"id": country, "title": country.title(),
                 "text": f"{city} is the capital and largest city of {country.title()}."}
                for country, city in CAPITALS.items()]
    passages += [{"id": "banana", "title": "Banana", "text": "A banana is an edible fruit sold in every city."},
                 {"id": "jupiter", "title": "Jupiter", "text": "Jupiter is the largest planet of the Solar System."}]
    source = write_jsonl(folder / "corpus.jsonl", passages)
    build_bm25_index(load_corpus(source).passages, folder / "index", source=str(source), source_checksum="x",
                     progress=False)
    write_jsonl(folder / "dev.jsonl", [{"id": f"q-{country}", "question": f"what is the capital of {country}",
                                        "golden_answers": [city]} for country, city in CAPITALS.items()])
    # An evaluation set sharing one question (differently cased and punctuated) with the dev set.
    write_jsonl(folder / "eval.jsonl", [{"id": "e1", "question": "What is the capital of Peru?",
                                         "golden_answers": ["Lima"]}])
    return folder


def data_files(folder: Path) -> None:
    write_jsonl(folder / "context.jsonl", [
        {"question": "who painted the mona lisa", "answers": ["Leonardo da Vinci"],
         "passage": {"title": "Mona Lisa", "text": "The Mona Lisa is a portrait painted by Leonardo da Vinci."}},
        {"question": "and when?", "answer": "between 1503 and 1519",
         "passage": "Leonardo painted it between 1503 and 1519.",
         "history": [{"role": "user", "content": "who painted the mona lisa"},
                     {"role": "assistant", "content": "Leonardo da Vinci"}]},
    ])
    write_jsonl(folder / "rag.jsonl", [
        {"question": "which river flows through egypt", "answers": ["Nile"],
         "gold": "The Nile flows north through Egypt.",
         "retrieved": ["Cairo is the capital of Egypt.", "The Nile delta is fertile.", "Egypt borders Libya.",
                       "The Sahara covers most of Egypt.", "Alexandria lies on the coast."]},
    ])
    (folder / "triples.tsv").write_text("largest planet\tJupiter is the largest planet.\tA banana is a fruit.\n"
                                        "edible fruit\tA banana is an edible fruit.\tRome is a city.\n", encoding="utf-8")
    answer = "the treaty was signed in the spring of that year by both parties"
    document = " ".join(["filler"] * 150) + " " + answer + " " + " ".join(["other"] * 140)
    write_jsonl(folder / "conv.jsonl", [{"question": "when was the treaty signed", "answer": answer,
                                         "document": document}])
    write_jsonl(folder / "sft.jsonl", [{"messages": [{"role": "user", "content": "Say hello."},
                                                     {"role": "assistant", "content": "Hello."}]}])


def blend_config(folder: Path, capitals: Path, *, seed: int = 3) -> Path:
    index, dev, evals = capitals / "index", capitals / "dev.jsonl", capitals / "eval.jsonl"
    text = f"""
seed = {seed}
size = 40
eval_sets = ["{evals}"]

[[component]]
name = "mined-ranking"
kind = "ranking"
qa = "{dev}"
index = "{index}"
ratio = "ms_marco_ranking"

[[component]]
name = "mined-rag-qa"
kind = "rag_qa"
qa = "{dev}"
index = "{index}"
depth = 10

[[component]]
name = "mined-rag-ranking"
kind = "rag_ranking"
qa = "{dev}"
index = "{index}"
ratio = 0.02

[[component]]
name = "context"
kind = "context_qa"
path = "context.jsonl"
ratio = 0.09

[[component]]
name = "files-rag"
kind = "rag_ranking"
path = "rag.jsonl"
ratio = 0.02

[[component]]
name = "msmarco"
kind = "ranking"
path = "triples.tsv"
ratio = 0.15

[[component]]
name = "conv"
kind = "conv_ranking"
path = "conv.jsonl"

[[component]]
name = "sft"
kind = "sft"
path = "sft.jsonl"
"""
    path = folder / f"blend-{seed}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def passage_texts(user: str) -> list[str]:
    """The numbered passages of a user turn ("Passage 1: …\nPassage 2: …"), each with its number."""
    return re.findall(r"Passage \d: .*?(?=\nPassage \d: |\n\n)", user, flags=re.S)


def rows(blend_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (blend_dir / "train.jsonl").read_text(encoding="utf-8").splitlines()]


def test_blend_mixes_every_component_in_the_unified_format(tmp_path, capitals):
    data_files(tmp_path)
    report = build_blend(blend_config(tmp_path, capitals), tmp_path / "blend")
    stats, built = report.stats, rows(tmp_path / "blend")
    components = stats["components"]
    # Appendix B ratios, normalised, then split by the largest remainder: the counts add up to `size`.
    ratios = {"mined-ranking": 0.15, "mined-rag-qa": 0.09, "mined-rag-ranking": 0.02, "context": 0.09,
              "files-rag": 0.02, "msmarco": 0.15, "conv": 0.03, "sft": 0.2}
    shares = {name: ratio / sum(ratios.values()) for name, ratio in ratios.items()}
    assert {name: c["taken"] for name, c in components.items()} == component_counts(shares, 40)
    assert len(built) == stats["size"] == 40
    assert {name: sum(r["component"] == name for r in built) for name in ratios} == component_counts(shares, 40)

    # Contamination: "what is the capital of peru" matches the evaluation question and is dropped everywhere.
    assert stats["contamination"]["dropped_total"] == 4  # one ranking pair (2 examples), one rag_qa, one rag_ranking
    assert components["mined-ranking"]["contaminated"] == {"eval.jsonl": 2}
    assert not any("peru" in m["content"].lower() for r in built for m in r["messages"] if m["role"] == "user")
    assert components["mined-ranking"]["pool"] == 14  # 7 questions x (gold True, one hard negative False)

    for row in built:
        messages = row["messages"]
        assert messages[-1]["role"] == "assistant" and messages[0] == {"role": "system", "content": SYSTEM}
        target, user = messages[-1]["content"], messages[-2]["content"]
        if row["kind"] in ("ranking", "conv_ranking"):
            assert target in ("True", "False") and user.startswith("Passage: ")
        if row["kind"] == "rag_qa":  # gold + four BM25 contexts, shuffled, and the answer from the gold passage
            # Appendix C.2 2) with Table 1's question, not the inference prompt of D.2.
            assert user.count("Passage ") == 5
            assert user.split("\n\n")[-1].startswith("Answer the following question from context. ")
            assert target in CAPITALS.values()
        if row["kind"] == "rag_ranking":
            numbers = [int(n) for n in target.split(", ")]
            texts = passage_texts(user)
            assert len(texts) == 5 and all(texts[n - 1].startswith(f"Passage {n}: ") for n in numbers)
    # The mined rag_ranking target is the id of the passage naming the capital.
    mined = [r for r in built if r["component"] == "mined-rag-ranking"][0]
    user = mined["messages"][-2]["content"]
    country = user.split("For the question what is the capital of ")[1].split(",")[0]
    ids = [int(n) for n in mined["messages"][-1]["content"].split(", ")]
    assert ids == [n for n in range(1, 6) if f"{CAPITALS[country]} is the capital" in passage_texts(user)[n - 1]]
    # A conversational context-QA example keeps its earlier turns, the context opening the first one.
    conversational = next(r for r in rows(tmp_path / "blend") if r["component"] == "context" and len(r["messages"]) > 3)
    assert [m["role"] for m in conversational["messages"]] == ["system", "user", "assistant", "user", "assistant"]
    assert conversational["messages"][1]["content"].startswith("Passage: Leonardo painted it")
    # Pseudo relevance: one chunk holds the answer (relevant), the others are below 0.1 (irrelevant).
    assert components["conv"]["pool"] == 3 and components["conv"]["targets"].keys() <= {"True", "False"}
    assert all(len(c["samples"]) >= 1 and "Assistant: " in c["samples"][0] for c in components.values())
    assert components["sft"]["repeats"] == components["sft"]["taken"] - 1  # a one-example pool, cycled

    # Same seed, same blend; another seed, another order.
    build_blend(blend_config(tmp_path, capitals), tmp_path / "again")
    assert rows(tmp_path / "again") == built
    build_blend(blend_config(tmp_path, capitals, seed=4), tmp_path / "other")
    assert [r["id"] for r in rows(tmp_path / "other")] != [r["id"] for r in built]


def test_blend_names_the_file_line_and_field_at_fault(tmp_path, capitals):
    data_files(tmp_path)
    write_jsonl(tmp_path / "context.jsonl", [{"question": "q", "answers": ["a"], "passage": "p"},
                                             {"question": "q2", "answers": ["a"]}])
    with pytest.raises(InputError) as caught:
        build_blend(blend_config(tmp_path, capitals), tmp_path / "blend")
    assert caught.value.path.endswith("context.jsonl") and caught.value.line == 2 and caught.value.field == "passage"
    assert not (tmp_path / "blend").exists()


def test_blend_command_prints_counts_and_names_bad_input(tmp_path, capitals):
    data_files(tmp_path)
    config = blend_config(tmp_path, capitals)

    def winnow(*args):
        return winnow_in_process(*args, env={"COLUMNS": "200"})

    done = winnow("train", "blend", "--config", str(config), "--out", str(tmp_path / "blend"))
    assert done.returncode == 0, done.stderr
    assert "mined-ranking" in done.stdout and "4 examples dropped" in done.stderr
    again = winnow("train", "blend", "--config", str(config), "--out", str(tmp_path / "blend"))
    assert again.returncode == 2 and "already exists" in again.stderr
    config.write_text(config.read_text().replace('kind = "sft"', 'kind = "chitchat"'))
    bad = winnow("train", "blend", "--config", str(config), "--out", str(tmp_path / "other"))
    assert bad.returncode == 2 and "blend-3.toml" in bad.stderr and "kind must be one of" in bad.stderr


def test_blend_refuses_test_questions(tmp_path, capitals):
    config = tmp_path / "blend.toml"
    config.write_text(f'[[component]]\nkind = "ranking"\nqa = "nq-test"\nindex = "{capitals / "index"}"\n')
    with pytest.raises(WinnowError, match="test questions"):
        build_blend(config, tmp_path / "blend")


def test_rag_qa_prompt_is_the_papers_training_prompt_unless_the_blend_asks_for_the_inference_one(tmp_path):
    from winnow.training.blend_config import read_blend_config
    from winnow.training.examples import rag_qa

    passages = [Passage(f"p{i}", f"Text {i}.") for i in range(5)]
    paper = rag_qa("c", "who wrote hamlet", passages, "Shakespeare")
    assert paper.messages[1]["content"].endswith("\n\nAnswer the following question from context. who wrote hamlet")
    inference = rag_qa("c", "who wrote hamlet", passages, "Shakespeare", wording="inference")
    assert inference.messages[:-1] == prompt("rankrag.rag").messages("who wrote hamlet", passages)
    data_files(tmp_path)
    config = tmp_path / "blend.toml"
    config.write_text('[[component]]\nkind = "rag_qa"\npath = "rag.jsonl"\nprompt = "inference"\n')
    assert read_blend_config(config).components[0].prompt == "inference"
    config.write_text('[[component]]\nkind = "ranking"\npath = "triples.tsv"\nprompt = "inference"\n')
    with pytest.raises(InputError, match="only for kind rag_qa") as caught:
        read_blend_config(config)
    assert caught.value.field == "prompt"


def test_stage_one_data_reads_as_the_instruction_datasets_publish_it(tmp_path):
    """RankRAG §4.1's SFT datasets come as messages or single instructions (Dolly, Alpaca-style
    Self-Instruct / Unnatural Instructions, FLAN); each becomes a user turn and the assistant's."""
    from winnow.training.sources import read_component_file

    path = write_jsonl(tmp_path / "sft.jsonl", [
        {"instruction": "Name a colour.", "context": "", "response": "Blue.", "category": "open_qa"},
        {"instruction": "Translate.", "input": "bonjour", "output": "hello"},
        {"inputs": "2 + 2 =", "targets": "4"},
        {"messages": [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}]},
    ])
    assert [c.messages for c in read_component_file("sft", path)] == [
        [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue."}],
        [{"role": "user", "content": "Translate.\n\nbonjour"}, {"role": "assistant", "content": "hello"}],
        [{"role": "user", "content": "2 + 2 ="}, {"role": "assistant", "content": "4"}],
        [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}]]
    write_jsonl(path, [{"instruction": "Name a colour.", "answer": "Blue."}])
    with pytest.raises(InputError, match="an instruction and its response") as caught:
        read_component_file("sft", path)
    assert caught.value.line == 1 and caught.value.field == "messages"


def test_pseudo_relevance_chunks_and_thresholds():
    document = " ".join(f"w{i}" for i in range(320))
    assert [len(c.split()) for c in word_chunks(document)] == [150, 150, 20]
    assert ngram_recall("a b c d e", "b c d e") == 1.0 and ngram_recall("a b c", "x y z w") == 0.0
    assert ngram_recall("the cat sat down", "cat sat") == 1.0  # short answers use n-grams of their length
    answer = " ".join(f"w{i}" for i in range(140, 160))  # straddles chunks 1 and 2
    labels = label_chunks(document, answer)
    # 4-gram recall: chunk 1 holds 7 of 17 (0.41, undecided), chunk 2 holds 7 of 17 too: neither is kept;
    # chunk 3 holds none (irrelevant).
    assert labels == [(word_chunks(document)[2], False)]


# --- fine-tuning --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ranking_blend(capitals, tmp_path_factory):
    folder = tmp_path_factory.mktemp("ranking-blend")
    config = folder / "blend.toml"
    config.write_text(f'seed = 0\neval_sets = []\n[[component]]\nkind = "ranking"\nqa = "{capitals / "dev.jsonl"}"\n'
                      f'index = "{capitals / "index"}"\n', encoding="utf-8")
    build_blend(config, folder / "blend")
    return folder / "blend"


def losses(run: Path) -> list[float]:
    with (run / "curve.csv").open() as handle:
        return [float(row["loss"]) for row in csv.DictReader(handle)]


def settings(blend: Path, out: Path, **extra):
    from winnow.training.sft import SFTSettings

    chosen = {"max_steps": 6, "batch_size": 2, "lr": 2e-3, "save_steps": 2, "threads": available_cores(), "adam_beta2": 0.98, **extra}
    return SFTSettings(base="smollm2-135m", data=str(blend), out=str(out), **chosen)


class Interrupted(Exception):
    pass


@pytest.fixture(scope="module")
def tuned(ranking_blend, tmp_path_factory):
    from winnow.training.sft import train_sft

    out = tmp_path_factory.mktemp("runs") / "tuned"
    report = train_sft(settings(ranking_blend, out))
    return out, report


@pytest.mark.slow
def test_training_loss_falls_and_the_run_folder_is_complete(tuned):
    out, report = tuned
    curve = losses(out)
    assert report.steps == 6 and len(curve) == 6 and report.examples == 16
    assert sum(curve[-2:]) / 2 < 0.5 * sum(curve[:2]) / 2
    assert (out / "curve.png").stat().st_size > 0
    record = json.loads((out / "model" / "winnow-model.json").read_text())
    assert record["finetune"] == "lora" and record["steps"] == 6 and record["base"]["spec"] == "smollm2-135m"
    assert record["framing"] == "chat" and json.loads((out / "run.json").read_text())["settings"]["framing"] == "chat"
    assert (out / "model" / "adapter_model.safetensors").is_file()
    # The Adam betas reach the optimizer (β2 0.98 as in RankRAG §5.1; transformers' default is 0.999).
    import torch

    optimizer = torch.load(out / "checkpoints" / "checkpoint-6" / "optimizer.pt", weights_only=True)
    assert {tuple(group["betas"]) for group in optimizer["param_groups"]} == {(0.9, 0.98)}
    assert json.loads((out / "run.json").read_text())["settings"]["adam_beta2"] == 0.98


def test_paper_presets_hold_section_5_1_values_and_explicit_options_win(tmp_path):
    """RankRAG §5.1: Stage-I batch 128, 1000 steps, lr 5e-6; Stage-II lr 3e-7 (8B) / 2e-7 (70B),
    batch 64, 3300 steps; Adam β1 = 0.9, β2 = 0.98; both stages tune every weight."""
    from winnow.training.presets import apply_preset
    from winnow.training.sft import SFTSettings

    where = {"base": "smollm2-135m", "data": "blend", "out": "run"}

    def resolve(name, **given):
        values, applied = apply_preset(name, {**where, **given})
        return SFTSettings.from_values(values), applied

    stage2, applied = resolve("paper-stage2-8b")
    assert (stage2.lora, stage2.lr, stage2.global_batch, stage2.max_steps, stage2.adam_beta1, stage2.adam_beta2) == (
        False, 3e-7, 64, 3300, 0.9, 0.98)
    assert stage2.accumulation(processes=1) == 16 and stage2.accumulation(processes=4) == 4  # 64 = 4 × 16 × 1
    assert resolve("paper-stage2-70b")[0].lr == 2e-7 and applied.overridden == {}
    stage1, _ = resolve("paper-stage1")
    assert (stage1.lr, stage1.global_batch, stage1.max_steps, stage1.lora) == (5e-6, 128, 1000, False)
    # Explicit options override; --grad-accum sets the preset's global batch aside, --epochs its steps.
    mine, applied = resolve("paper-stage2-8b", lr=1e-5, grad_accum=2, epochs=2.0)
    assert (mine.lr, mine.global_batch, mine.grad_accum, mine.max_steps, mine.adam_beta2) == (1e-5, None, 2, None, 0.98)
    assert applied.overridden == {"lr": (3e-7, 1e-5), "global_batch": (64, None), "max_steps": (3300, None)}
    # The CPU default stays LoRA, with transformers' Adam betas.
    default, applied = resolve(None)
    assert (default.lora, default.adam_beta2, default.accumulation(1), applied) == (True, 0.999, 1, None)
    with pytest.raises(SettingError, match="global batch 64 is not a multiple") as caught:
        resolve("paper-stage2-8b", batch_size=5)[0].accumulation(1)
    assert caught.value.setting == "global_batch"
    with pytest.raises(SettingError) as caught:
        resolve(None, adam_beta2=1.0)
    assert caught.value.setting == "adam_beta2"
    with pytest.raises(SettingError, match="paper-stage2-8b") as caught:
        resolve("paper")
    assert caught.value.setting == "preset"


@pytest.mark.slow
def test_an_interrupted_run_resumes_from_its_checkpoint(tuned, ranking_blend, tmp_path):
    from winnow.training.sft import train_sft

    out = tmp_path / "interrupted"

    def stop_at_three(step, total, logs):
        if step == 3:
            raise Interrupted

    with pytest.raises(Interrupted):
        train_sft(settings(ranking_blend, out), on_step=stop_at_three)
    assert not (out / "model").exists() and (out / "checkpoints" / "checkpoint-2").is_dir()
    report = train_sft(settings(ranking_blend, out))
    assert report.resumed_from == 2 and report.steps == 6
    # The resumed run repeats the uninterrupted one step for step: same data order, optimizer and RNG.
    assert losses(out) == pytest.approx(losses(tuned[0]), rel=1e-4)
    with pytest.raises(WinnowError, match="other settings"):
        train_sft(settings(ranking_blend, out, lr=1e-4))


@pytest.mark.slow
def test_a_finished_run_is_not_trained_again(tuned, ranking_blend, tmp_path):
    from winnow.training.sft import train_sft

    # A copy of the finished module run (the folder is the run: run.json, checkpoints, model), so
    # that a defect here cannot touch what the other tests read.
    out = shutil.copytree(tuned[0], tmp_path / "finished")
    adapter = (out / "model" / "adapter_model.safetensors").read_bytes()
    again = train_sft(settings(ranking_blend, out))
    assert (tuned[1].steps, again.steps) == (6, 6) and len(losses(out)) == 6
    assert (out / "model" / "adapter_model.safetensors").read_bytes() == adapter
    # Another optimizer step would have written checkpoint-7 (and pruned checkpoint-4).
    assert sorted(p.name for p in (out / "checkpoints").glob("checkpoint-*")) == ["checkpoint-4", "checkpoint-6"]


# --- the transformers backend -------------------------------------------------------------------

@pytest.fixture(scope="module")
def transformers_backend():
    from winnow.llm.transformers_backend import TransformersBackend

    backend = TransformersBackend("smollm2-135m", threads=available_cores())
    yield backend
    backend.close()


@pytest.mark.llm
def test_transformers_backend_agrees_with_llama_cpp_on_the_same_model(transformers_backend, llama_backend):
    template = prompt("rankrag.context_ranking")
    question = "who painted the mona lisa"
    relevant = Passage("m", "The Mona Lisa is a portrait painted by Leonardo da Vinci.", "Mona Lisa")
    irrelevant = Passage("b", "A banana is an elongated, edible fruit produced by plants.", "Banana")
    prompts = [template.messages(question, [relevant]), template.messages(question, [irrelevant])]
    ours = transformers_backend.choice_logprobs(prompts, ("True", "False"))
    theirs = llama_backend.choice_logprobs(prompts, ("True", "False"))
    for scores in ours:
        assert scores.probability("True") + scores.probability("False") == pytest.approx(1.0, abs=1e-9)
        assert not scores.missing and scores.prompt_tokens > 50
    assert ours[0].probability("True") > ours[1].probability("True")
    assert theirs[0].probability("True") > theirs[1].probability("True")
    # The dequantised weights are the GGUF's: llama.cpp (8-bit activations) agrees to a few points.
    for a, b in zip(ours, theirs):
        assert abs(a.probability("True") - b.probability("True")) < 0.1
    [generation] = transformers_backend.generate([[{"role": "user", "content": "What is the capital of France?"}]],
                                                 max_tokens=12)
    assert "Paris" in generation.text and generation.completion_tokens <= 12


@pytest.mark.llm
def test_transformers_backend_counts_tokens_and_says_why_it_stopped(transformers_backend, llama_backend):
    from winnow.llm import LLM

    ours, theirs = LLM(transformers_backend), LLM(llama_backend)
    text = "The Mona Lisa is a portrait painted by Leonardo da Vinci, in Florence. " * 30
    # The same model's tokenizer, read from the GGUF by two libraries, counts alike.
    assert ours.count_tokens(text) == theirs.count_tokens(text) > 300
    assert ours.truncate_tokens(text, 25) == theirs.truncate_tokens(text, 25)
    messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Who painted it?"}]
    assert ours.count_prompt_tokens(messages) == len(transformers_backend.token_ids(messages))
    assert ours.count_prompt_tokens(messages) == theirs.count_prompt_tokens(messages)
    assert ours.context_size == 8192 and "max_position_embeddings" in ours.context_size_source
    [cut] = transformers_backend.generate([[{"role": "user", "content": "Tell me a long story."}]], max_tokens=2)
    assert (cut.finish_reason, cut.completion_tokens) == ("length", 2)


@pytest.mark.llm
def test_transformers_backend_sends_a_plain_prompt_without_the_chat_template(transformers_backend, llama_backend):
    """The plain framing: RankRAG Appendix D's text, tokenized as it is (no template) by both backends."""
    relevant = Passage("m", "The Mona Lisa is a portrait painted by Leonardo da Vinci.", "Mona Lisa")
    plain = prompt("rankrag.context_ranking").render_plain("who painted the mona lisa", [relevant])
    [ours] = transformers_backend.choice_logprobs([plain], ("True", "False"))
    [theirs] = llama_backend.choice_logprobs([plain], ("True", "False"))
    assert ours.prompt_tokens == len(transformers_backend.encode(plain)) == theirs.prompt_tokens
    assert abs(ours.probability("True") - theirs.probability("True")) < 0.1


@pytest.mark.slow
def test_the_plain_framing_trains_on_the_tokens_evaluation_sends(ranking_blend, transformers_backend):
    """`winnow train sft --framing plain`: the prompt tokens are those of App. D's text as the
    transformers backend sends it, and the loss falls on " True"/" False" and the end of text."""
    from winnow.training.examples import plain_example
    from winnow.training.sft import read_blend, tokenise

    rows = read_blend(ranking_blend, limit=4, framing="plain")
    tokenizer = transformers_backend._tokenizer
    blend = tokenise(rows, tokenizer, 2048, framing="plain")
    assert len(blend.input_ids) == 4 and blend.prompt_mismatch == 0
    for row, ids, mask in zip(rows, blend.input_ids, blend.completion_mask, strict=True):
        prompt_text, completion = plain_example(row["messages"], row["context_chars"])
        shared = mask.index(1)
        assert ids[:shared] == transformers_backend.token_ids(prompt_text)
        assert tokenizer.decode(ids[shared:]) == completion + tokenizer.eos_token
        assert completion in (" True", " False")


@pytest.mark.slow
def test_tuned_model_runs_in_a_method_and_has_its_own_identity(tuned, capitals, transformers_backend):
    """The tuned model (its LoRA adapter on the base) is the one that ranks, under its own identity.

    Six steps of two examples teach this model the True/False answer, not yet which passage is
    relevant: it scores every capital passage about 0.68 (Spain 0.688, Japan 0.680), so the test
    asks for scores that are not the base model's, not for a ranking. That the ranking prompt is the
    training prompt byte for byte is tests/test_training_framing.py's; what tuning does to ranking
    quality is measured on real data in docs/results.md."""
    import winnow
    from winnow.llm import LLM

    llm = winnow.load_llm(str(tuned[0]), backend="transformers", cache=False, threads=available_cores())
    try:
        assert llm.identity["backend"] == "transformers" and llm.identity["model"] == "tuned"
        assert llm.identity["sha256"] != transformers_backend.identity["sha256"]

        def rerank_scores(model):
            rag = winnow.build_method("rankrag", index=BM25Index.open(capitals / "index"), llm=model, n=4, k=2,
                                      max_answer_tokens=8)
            answer = rag.ask("what is the capital of japan")
            [rerank] = [stage for stage in answer.trace.stages if stage.name == "rerank"]
            return answer, {c["id"]: c["score"] for c in rerank.output}

        answer, tuned_scores = rerank_scores(llm)
        assert answer.trace.usage.calls == 5
        _, base_scores = rerank_scores(LLM(transformers_backend))
        assert tuned_scores.keys() == base_scores.keys() and "japan" in tuned_scores
        assert all(abs(tuned_scores[pid] - base_scores[pid]) > 1e-3 for pid in tuned_scores), (tuned_scores,
                                                                                             base_scores)
        # Trained on chat turns, it is not prompted in the plain framing (--profile paper's).
        with pytest.raises(SettingError, match="--framing chat"):
            winnow.build_method("rankrag", index=BM25Index.open(capitals / "index"), llm=llm, framing="plain")
    finally:
        llm.close()


@pytest.mark.subprocess
def test_core_command_line_does_not_import_torch():
    code = ("import sys, winnow.cli, winnow.commands.train, winnow.training.blend, winnow.llm; "
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "False"]
