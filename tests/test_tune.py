"""``winnow tune``: the search space's checks, successive halving, the honest report, resuming, run files.

Large searches run against ``bench/loadtest_server.py`` (a real OpenAI-compatible HTTP server on
loopback that answers at a GPU server's call rate, with P("True") and listwise scores that are a
pure function of the prompt, and one fixed answer text). Its corpus is built so that the first stage
is poor on purpose: every question's answer passage sits at BM25 rank 13, below twelve passages that
repeat the question's words, so vanilla's top k never holds it and a reranker over the top 20 finds
it by chance; answer Recall@5 then separates the configurations. A second corpus puts the answer
passage first, so vanilla is best. The one small real-model test runs SmolLM2-135M in process.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fast_model import suite_model
from service_server import running_server

from winnow.corpus import load_corpus
from winnow.errors import InputError, WinnowError
from winnow.index import build_bm25_index
from winnow.run_spec import RunSpec
from winnow.tuning.configuration import Configuration, reference_params
from winnow.tuning.halving import Point, can_reach_front, pareto_front, promoted, rung_sizes
from winnow.tuning.objectives import parse_objective
from winnow.tuning.runfile import run_file_text
from winnow.tuning.space import parse_space, read_space

MODEL = suite_model()

ROOT = Path(__file__).resolve().parents[1]
WORDS = ("amber", "basalt", "cobalt", "dune", "ember", "fjord", "garnet", "harbor", "iris", "jade", "kelp", "lumen",
         "moss", "nectar", "onyx", "pylon", "quartz", "ridge", "slate", "tundra")
QUESTIONS = 66  # 22 to confirm on, 44 to tune on: rungs of 5, 15 and 44 questions

SPACE = """\
[vanilla]
k = [3, 5]

[rankrag]
n = [10, 20]
k = [3, 5]
fusion_alpha = [0.0, 0.25, 0.5]

[mainrag]
n = [10, 20]
judge_n = [-0.5, 0.0, 0.5, 1.0]

[rankgpt]
n = [10, 20]
k = [3, 5]
window = [5, 10]
step = [3, 5]
"""


def winnow(*args, check=True, timeout=600):
    env = {**os.environ, "COLUMNS": "200"}
    result = subprocess.run([sys.executable, "-m", "winnow.cli", *map(str, args)], capture_output=True, text=True,
                            env=env, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"winnow {' '.join(map(str, args))} failed ({result.returncode}):\n{result.stderr}")
    return result


def make_bench(folder: Path, *, hard: bool) -> Path:
    """``folder/idx`` and ``folder/qa.jsonl`` (see the module notes)."""
    folder.mkdir(parents=True, exist_ok=True)
    corpus, questions = [], []
    for q in range(QUESTIONS):
        topic = f"{WORDS[q % 20]}{WORDS[(q // 20) % 20]}{q}"
        answer = f"hue{q}x"
        for d in range(12 if hard else 4):
            corpus.append({"id": f"d{q}-{d}", "title": topic, "text": f"The {topic} {topic} {topic} colour is "
                                                                      f"discussed at length in chapter {d}, {topic}."})
        named = topic if hard else " ".join([topic] * 6)
        corpus.append({"id": f"a{q}", "title": "Records", "text": f"In the records, the {named} is painted {answer}."})
        questions.append({"id": f"q{q}", "question": f"Which colour does the {topic} have?",
                          "golden_answers": [answer]})
    source = folder / "corpus.jsonl"
    source.write_text("".join(json.dumps(p) + "\n" for p in corpus))
    build_bm25_index(load_corpus(source).passages, folder / "idx", source=str(source), source_checksum=folder.name,
                     progress=False)
    (folder / "qa.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    (folder / "space.toml").write_text(SPACE)
    return folder


@pytest.fixture(scope="module")
def server():
    """bench/loadtest_server.py on a free loopback port: 64 slots, 20 ms a call."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, str(ROOT / "bench" / "loadtest_server.py"), "--port", str(port),
                                "--capacity", "64", "--base-latency", "0.02", "--prefill-rate", "1000000",
                                "--decode-rate", "100000"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            httpx.get(f"{url}/stats", timeout=1)
            break
        except httpx.TransportError:
            time.sleep(0.1)
    yield f"{url}/v1"
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture(scope="module")
def hard(tmp_path_factory):
    return make_bench(tmp_path_factory.mktemp("tune-hard"), hard=True)


def tune_args(bench: Path, server: str, study: Path, *extra):
    return ("tune", "--index", bench / "idx", "--queries", bench / "qa.jsonl", "--space", bench / "space.toml",
            "--backend", "openai", "--model", "loadtest", "--base-url", server, "--study", study, *extra)


@pytest.fixture(scope="module")
def searched(hard, server, tmp_path_factory):
    """One search of 32 configurations of four methods, its output and its study folder."""
    study = tmp_path_factory.mktemp("tune-study") / "study"
    result = winnow(*tune_args(hard, server, study, "--objective", "answer_recall@5", "--trials", "32"))
    return result, study, json.loads((study / "summary.json").read_text())


def trials_of(study: Path):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name="winnow-tune", storage=f"sqlite:///{study / 'study.sqlite'}").trials


# --- the search space ------------------------------------------------------------------------------

@pytest.mark.parametrize("text, field, message", [
    ("[rankragg]\nn = [10]\n", "rankragg", "unknown method 'rankragg'"),
    ("[rankrag]\nnn = [10, 20]\n", "rankrag.nn", "method 'rankrag' has no setting 'nn'"),
    ("[rankrag]\nn = [0, 20]\n", "rankrag.n", "setting 'n' must be at least 1 (got 0)"),
    ("[rankrag]\nfusion_alpha = { low = 0.0, high = 1.5 }\n", "rankrag.fusion_alpha",
     "setting 'fusion_alpha' must be between 0 and 1 (got 1.5)"),
    ("[rankrag]\nn = 200000\n", "rankrag.n", "setting 'n' must be at most 100,000"),
    ("[rankrag]\nn = [4]\nk = [5]\n", "rankrag.n", "setting 'k' (5) cannot exceed setting 'n' (4)"),
    ("[vanilla]\nn = [3, 5]\n", "vanilla.n", "method 'vanilla' does not use setting 'n'"),
    ("[mainrag.agents]\njudgee = [\"smollm2-135m\"]\n", "mainrag.agents.judgee", "no agent role(s) ['judgee']"),
    ("[rankgpt]\nwindow = { low = 5, high = 10, step = 3 }\n", "rankgpt.window", "not a multiple of its step"),
    ("[rankrag]\nscore = { low = 1, high = 2 }\n", "rankrag.score", "not a number"),
    ("[rankrag]\nn = [10, 10]\n", "rankrag.n", "the value 10 is given twice"),
    ("[rankrag]\nk = { low = 2.5, high = 4 }\n", "rankrag.k", "must be one (got 2.5)"),
])
def test_a_bad_space_is_refused_naming_the_file_the_method_and_the_setting(tmp_path, text, field, message):
    path = tmp_path / "space.toml"
    path.write_text(text)
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")) as caught:
        read_space(path)
    assert caught.value.path == str(path) and caught.value.field == field


def test_a_value_is_accepted_when_another_value_of_the_space_satisfies_the_rules_between_settings():
    # k = 10 is above n = 5, but n = 20 is in the space too: the pair is drawn only where k ≤ n holds.
    space = parse_space({"rankrag": {"n": [5, 20], "k": [3, 10]}, "rankgpt": {"window": [4, 10], "step": [3, 5]}}, "s")
    assert [d.name for d in space.methods["rankrag"].dimensions] == ["rankrag.n", "rankrag.k"]
    assert list(space.methods) == ["vanilla", "rankrag", "rankgpt"]  # vanilla, the reference, always
    assert space.size() == 1 + 4 + 4


def test_the_default_space_covers_every_method_and_passes_its_own_checks():
    space = read_space(None)
    assert set(space.methods) == {"vanilla", "rankrag", "mainrag", "rrr", "rankgpt"}
    assert space.size() and space.size() > 100
    # Top-level values apply to every method that has the setting; the reference is vanilla's defaults.
    shared = parse_space({"max_answer_tokens": 8, "vanilla": {"k": [3, 10]}, "rankrag": {}}, "s")
    assert shared.methods["rankrag"].fixed == {"max_answer_tokens": 8}
    assert reference_params(shared) == {"method": "vanilla", "vanilla.k": 3}  # the nearest to k = 5


def test_objectives_and_costs_are_parsed_or_refused_in_one_line():
    assert parse_objective("ndcg@10").k == 10 and parse_objective("answer_recall@5").kind == "answer_recall"
    assert parse_objective("EM").name == "em"
    for bad in ("acc", "ndcg@0", "recall@5"):
        with pytest.raises(WinnowError, match="is not an objective"):
            parse_objective(bad)


@pytest.mark.subprocess
def test_bad_options_get_one_line_before_any_model_loads(tmp_path, hard):
    bad_space = tmp_path / "space.toml"
    bad_space.write_text("[rankrag]\nn = [0, 20]\n")
    base = ("tune", "--index", hard / "idx", "--queries", hard / "qa.jsonl", "--backend", "openai", "--model", "m",
            "--base-url", "http://127.0.0.1:9/v1", "--study", tmp_path / "study")
    for extra, message in ((("--space", bad_space), f"{bad_space}, field 'rankrag.n': setting 'n' must be at least 1"),
                           (("--objective", "acc"), "--objective 'acc' is not an objective"),
                           (("--cost", "money"), "--cost 'money' is not a cost"),
                           (("--cost", "usd"), "--cost usd needs a price table"),
                           (("--objective", "ndcg@10"), "needs relevance judgements"),
                           (("--storage", "nonsense://x"), "the study 'winnow-tune' in nonsense://x cannot be "
                                                           "opened")):
        result = winnow(*base, *extra, check=False)
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr, result.stderr


# --- halving ---------------------------------------------------------------------------------------

def test_rungs_grow_by_eta_to_every_tuning_question():
    assert rung_sizes(44, 3, 5) == [5, 15, 44]
    assert rung_sizes(60, 3, 5) == [7, 20, 60]
    assert rung_sizes(4, 3, 5) == [4]


def test_a_configuration_is_dropped_only_when_a_rival_no_dearer_is_clearly_better():
    ones, zeros = (1.0,) * 10, (0.0,) * 10
    cheap_good, dear_bad = Point(1, ones, 1.0), Point(2, zeros, 5.0)
    assert not can_reach_front(dear_bad, [cheap_good, dear_bad])
    assert can_reach_front(Point(3, zeros, 0.5), [cheap_good])  # cheaper: still a front point
    assert can_reach_front(Point(4, (1.0,) * 9 + (0.0,), 5.0), [cheap_good])  # a lead of one question is no proof
    assert [p.key for p in pareto_front([cheap_good, dear_bad, Point(3, zeros, 0.5)])] == [3, 1]
    # Halving keeps the best 1/eta by Pareto rank, and the reference whatever it scores.
    bracket = [Point(k, (k / 10,) * 10, 1.0 + k) for k in range(1, 10)] + [Point(0, zeros, 1.0)]
    assert set(promoted(bracket, bracket, 3, always=[0])) == {0, 9, 8, 7}


def test_a_run_file_is_the_config_format_every_front_door_reads(tmp_path):
    spec = RunSpec(model="qwen2.5-coder-1.5b", backend="openai", base_url="http://h:8000/v1")
    configuration = Configuration("mainrag", {"n": 10, "judge_n": 0.5}, {"judge": "qwen2.5-coder-0.5b"})
    path = tmp_path / "run.toml"
    path.write_text(run_file_text(spec, configuration, ["from a test"]))
    resolved = RunSpec.resolve(config=path)
    assert (resolved.method, resolved.model, resolved.backend, resolved.base_url) == (
        "mainrag", "qwen2.5-coder-1.5b", "openai", "http://h:8000/v1")
    assert resolved.settings == {"n": 10, "judge_n": 0.5} and resolved.agents == {"judge": "qwen2.5-coder-0.5b"}


# --- a search against the load-test server ---------------------------------------------------------

@pytest.mark.subprocess
def test_thirty_configurations_of_three_methods_cost_at_most_40_percent_of_the_full_grid(searched):
    result, study, summary = searched
    spending = summary["spending"]
    trials = [t for t in trials_of(study) if "config" in t.user_attrs]
    methods = {t.user_attrs["config"]["method"] for t in trials}
    keys = {Configuration.from_dict(t.user_attrs["config"]).key() for t in trials}
    assert len(keys) == len(trials) >= 30 and len(methods - {"vanilla"}) >= 3
    assert spending["configurations"] == len(keys)
    assert spending["calls_made"] <= 0.40 * spending["full_grid_calls"], spending
    # Both counts are printed, with the share.
    assert f"LLM calls: {spending['calls_made']:,} made for tuning against {spending['full_grid_calls']:,.0f}" \
        in " ".join(result.stdout.split())
    assert summary["trials"]["pruned"] > summary["trials"]["complete"] >= 2


@pytest.mark.subprocess
def test_the_report_leads_with_the_confirming_gain_over_vanilla_and_its_interval(searched):
    result, study, summary = searched
    lead = summary["lead"]
    best = next(row for row in summary["confirmed"] if row["trial"] == summary["best"])
    assert not best["reference"] and best["method"] in ("rankrag", "rankgpt")  # a reranker finds rank 13
    # Vanilla's top 5 never holds the answer: vanilla is on the front (the cheapest), said first.
    assert lead[0].startswith("Vanilla is on the Pareto front")
    difference = best["difference"]
    assert lead[1].startswith(f"Best configuration: {best['label']}: answer_recall@5 "
                              f"{100 * difference['mean_difference']:+.1f} over vanilla with the same model on the "
                              f"22 confirming questions (95% paired bootstrap interval")
    assert difference["questions"] == 22 and difference["low"] <= difference["mean_difference"] <= difference["high"]
    text = " ".join(result.stdout.split())
    assert text.startswith(" ".join(lead[0].split())) and " ".join(lead[1].split()) in text
    assert (study / "front.png").stat().st_size > 1000 and "![quality against cost](front.png)" in \
        (study / "report.md").read_text()


@pytest.mark.subprocess
def test_a_tuned_run_file_gives_the_same_answers_through_eval_ask_serve_and_an_adapter(searched, hard, tmp_path):
    _, study, summary = searched
    best = study / "best.toml"
    number = summary["best"]
    confirmed = json.loads(trials_of_attr(study, f"confirm:{number}"))
    out = tmp_path / "eval"
    winnow("eval", "--index", hard / "idx", "--queries", study / "confirming.jsonl", "--config", best, "--out", out)
    records = {json.loads(line)["id"]: json.loads(line) for line in (out / "answers.jsonl").read_text().splitlines()}
    assert [[records[qid]["answer"], records[qid]["final"]["ids"]] for qid in confirmed["ids"]] == confirmed["answers"]
    first = json.loads((study / "confirming.jsonl").read_text().splitlines()[0])
    asked = json.loads(winnow("ask", "--index", hard / "idx", "--config", best, "--json", first["question"]).stdout)
    assert [asked["answer"], [p["id"] for p in asked["passages"]]] == confirmed["answers"][0]
    # `winnow serve --config` and a framework adapter's `config=` read the same file the same way.
    with running_server(hard / "idx", tmp_path / "serve-cache", "--config", str(best), model=None) as base:
        served = httpx.post(f"{base}/v1/ask", json={"question": first["question"]}, timeout=120)
    assert served.status_code == 200, served.text
    assert [served.json()["answer"], [p["id"] for p in served.json()["passages"]]] == confirmed["answers"][0]
    from winnow.integrations.langchain import WinnowRetriever
    from winnow.integrations.llamaindex import WinnowQueryEngine

    with WinnowRetriever(index=hard / "idx", config=best) as retriever:
        assert [d.id for d in retriever.invoke(first["question"])] == confirmed["answers"][0][1]
    with WinnowQueryEngine(index=hard / "idx", config=best) as engine:
        response = engine.query(first["question"])
        assert [response.response, [n.node.node_id for n in response.source_nodes]] == confirmed["answers"][0]


def finished_trials(study: Path) -> int:
    """Trials finished (complete or pruned) with a configuration, read from the study's SQLite file
    read-only while `winnow tune` writes it. Not through optuna: opening a study creates its tables
    when they are missing, which races the command's own creation of them (it then fails)."""
    import sqlite3

    try:
        with sqlite3.connect(f"file:{study / 'study.sqlite'}?mode=ro", uri=True, timeout=5) as connection:
            return int(connection.execute(
                "SELECT COUNT(DISTINCT t.trial_id) FROM trials t JOIN trial_user_attributes a "
                "ON a.trial_id = t.trial_id WHERE t.state IN ('COMPLETE', 'PRUNED') AND a.key = 'config'"
            ).fetchone()[0])
    except sqlite3.Error:  # the tables not made yet, or the writer's lock held past the timeout
        return 0


def trials_of_attr(study: Path, key: str) -> str:
    import optuna

    loaded = optuna.load_study(study_name="winnow-tune", storage=f"sqlite:///{study / 'study.sqlite'}")
    return json.dumps(loaded.user_attrs[key])


@pytest.mark.subprocess
def test_when_vanilla_is_best_the_report_says_so_first(server, tmp_path):
    easy = make_bench(tmp_path / "easy", hard=False)
    result = winnow(*tune_args(easy, server, tmp_path / "study", "--objective", "answer_recall@5", "--trials", "8",
                               "--bracket", "4"))
    summary = json.loads((tmp_path / "study" / "summary.json").read_text())
    assert summary["lead"][0].startswith("Vanilla is the best configuration: none of the 8 configurations tried "
                                         "beat vanilla with loadtest (vanilla k=5)")
    assert " ".join(result.stdout.split()).startswith(" ".join(summary["lead"][0].split()))
    assert (tmp_path / "study" / "best.toml").read_text().count('method = "vanilla"') == 1


@pytest.mark.subprocess
def test_an_interrupted_study_resumes_without_measuring_a_finished_trial_again(hard, server, tmp_path):
    study = tmp_path / "study"
    args = tune_args(hard, server, study, "--objective", "answer_recall@5", "--trials", "12", "--bracket", "4")
    env = {**os.environ, "COLUMNS": "200"}
    process = subprocess.Popen([sys.executable, "-m", "winnow.cli", *map(str, args)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
    finished_states = ("COMPLETE", "PRUNED")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        if (study / "study.sqlite").exists() and finished_trials(study) >= 3:
            break
        time.sleep(0.2)
    assert process.poll() is None, f"the study finished before it could be interrupted: {process.communicate()}"
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-3000:]
    # The last message (rich wraps it where the run folder's path makes it longer than the terminal).
    last = " ".join(stderr[stderr.rfind("\ninterrupted: ") + 1:].split())
    assert last.startswith("interrupted: ") and "run the same command again to continue" in last, stderr[-600:]
    before = {t.number: (t.state.name, json.dumps(t.user_attrs, sort_keys=True)) for t in trials_of(study)
              if t.state.name in finished_states and "config" in t.user_attrs}
    assert len(before) >= 3
    # Continued under other conditions, the study refuses in one line.
    refused = winnow(*args[:-4], "--objective", "em", "--trials", "12", "--bracket", "4", check=False)
    assert refused.returncode == 2 and "was begun with objective = 'answer_recall@5', not 'em'" in refused.stderr
    winnow(*args)
    after = [t for t in trials_of(study) if "config" in t.user_attrs]
    assert len(after) == 12  # every configuration drawn once, none again
    assert all((t.state.name, json.dumps(t.user_attrs, sort_keys=True)) == before[t.number]
               for t in after if t.number in before)  # finished trials untouched: not measured again
    assert all(t.state.name in ("COMPLETE", "PRUNED") for t in after)


# --- a real model --------------------------------------------------------------------------------

SMALL_PASSAGES = [
    ("paris", "Paris", "Paris is the capital and most populous city of France."),
    ("berlin", "Berlin", "Berlin is the capital and largest city of Germany."),
    ("mona", "Mona Lisa", "The Mona Lisa is a portrait painted by Leonardo da Vinci."),
    ("jupiter", "Jupiter", "Jupiter is the largest planet in the Solar System."),
    ("rome", "Rome", "Rome is the capital city of Italy."),
    ("nile", "Nile", "The Nile is a major river in northeastern Africa."),
    ("madrid", "Madrid", "Madrid is the capital of Spain."),
    ("everest", "Everest", "Mount Everest is the highest mountain above sea level."),
]
SMALL_QUESTIONS = [("capital of France", "Paris"), ("capital of Germany", "Berlin"),
                   ("who painted the Mona Lisa", "Leonardo da Vinci"), ("largest planet", "Jupiter")]


@pytest.mark.subprocess
@pytest.mark.llm
def test_a_small_search_on_smollm2_and_its_best_run_file_answer_alike(tmp_path):
    source = tmp_path / "corpus.jsonl"
    source.write_text("".join(json.dumps({"id": i, "title": t, "text": x}) + "\n" for i, t, x in SMALL_PASSAGES))
    build_bm25_index(load_corpus(source).passages, tmp_path / "idx", source=str(source), source_checksum="small",
                     progress=False)
    qa = tmp_path / "qa.jsonl"
    qa.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is the {q}?", "golden_answers": [a]}) + "\n"
                          for i, (q, a) in enumerate(SMALL_QUESTIONS)))
    space = tmp_path / "space.toml"
    space.write_text("max_answer_tokens = 8\n[vanilla]\nk = [1]\n[rankrag]\nn = [2]\nk = [1]\n")
    study = tmp_path / "study"
    result = winnow("tune", "--index", tmp_path / "idx", "--queries", qa, "--space", space, "--model", MODEL,
                    "--study", study, "--trials", "2", "--confirm-share", "0.5", "--objective", "accuracy",
                    timeout=1500)
    summary = json.loads((study / "summary.json").read_text())
    assert summary["questions"] == {"tuning": 2, "confirming": 2, "rungs": [2]}
    assert summary["trials"]["configurations"] == 2 and summary["trials"]["complete"] == 2
    assert summary["lead"][0].startswith(("Vanilla", "Best configuration")) and "Pareto front" in result.stdout
    best = study / "best.toml"
    confirmed = json.loads(trials_of_attr(study, f"confirm:{summary['best']}"))
    out = tmp_path / "eval"
    winnow("eval", "--index", tmp_path / "idx", "--queries", study / "confirming.jsonl", "--config", best, "--out", out,
           timeout=1500)
    records = {json.loads(line)["id"]: json.loads(line) for line in (out / "answers.jsonl").read_text().splitlines()}
    assert [[records[qid]["answer"], records[qid]["final"]["ids"]] for qid in confirmed["ids"]] == confirmed["answers"]
    first = json.loads((study / "confirming.jsonl").read_text().splitlines()[0])
    asked = json.loads(winnow("ask", "--index", tmp_path / "idx", "--config", best, "--json", first["question"],
                              timeout=1500).stdout)
    assert [asked["answer"], [p["id"] for p in asked["passages"]]] == confirmed["answers"][0]


@pytest.mark.subprocess
def test_an_agent_roles_model_is_searched_and_priced_in_usd(server, hard, tmp_path):
    space = tmp_path / "space.toml"
    space.write_text('[mainrag]\nn = [5]\njudge_n = [0.0, 1.0]\n[mainrag.agents]\njudge = ["loadtest", "dear"]\n')
    prices = tmp_path / "prices.toml"
    prices.write_text('[models."loadtest"]\nprompt = 1.0\ncompletion = 2.0\n'
                      '[models."dear"]\nprompt = 100.0\ncompletion = 200.0\n')
    study = tmp_path / "study"
    winnow("tune", "--index", hard / "idx", "--queries", hard / "qa.jsonl", "--space", space, "--backend", "openai",
           "--model", "loadtest", "--base-url", server, "--study", study, "--trials", "5", "--bracket", "5",
           "--cost", "usd", "--prices", prices, "--objective", "answer_recall@5")
    trials = {t.number: t for t in trials_of(study) if "config" in t.user_attrs}
    judges = {t.user_attrs["config"]["agents"].get("judge") for t in trials.values() if t.number}
    assert judges == {"loadtest", "dear"} and len(trials) == 5
    # The judge on the dear model costs more per question than on the cheap one, at the same settings.
    cost = {(t.user_attrs["config"]["agents"]["judge"], t.user_attrs["config"]["settings"]["judge_n"]):
            sum(json.loads(json.dumps(t.user_attrs["rung0"]))["cost"]) for t in trials.values() if t.number}
    assert all(cost[("dear", n)] > 10 * cost[("loadtest", n)] for n in (0.0, 1.0))
    assert any(t.user_attrs["label"].endswith("judge=dear") for t in trials.values())
    # Pricing every model is checked before the first trial: a model the table lacks is one line.
    prices.write_text('[models."loadtest"]\nprompt = 1.0\ncompletion = 2.0\n')
    refused = winnow("tune", "--index", hard / "idx", "--queries", hard / "qa.jsonl", "--space", space, "--backend",
                     "openai", "--model", "loadtest", "--base-url", server, "--study", tmp_path / "other", "--cost",
                     "usd", "--prices", prices, check=False)
    assert refused.returncode == 2 and "has no price for model(s) ['dear']" in refused.stderr
