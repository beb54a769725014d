"""``winnow eval --engine ray`` on a real Ray cluster that this module starts on 127.0.0.1 (one head
node, 2 CPUs), two workers each running SmolLM2-135M through llama.cpp: the same answers as the
single-process engine; and, with the workers asking a slow loopback server, a driver or a worker
killed with SIGKILL mid-run resumes with no question lost or answered twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakes import ScriptedServer
from fast_model import suite_model
from ray_head import SRC, free_port, ray_head
from test_evaluation import CORPUS as EVAL_CORPUS
from test_evaluation import QUESTIONS as EVAL_QUESTIONS
from test_evaluation import cached_choice_keys, make_bench, poison_cached_judgements, read_lines
from test_evaluation import winnow as eval_winnow

MODEL = suite_model()

ray = pytest.importorskip("ray")

# The corpus and questions of the single-process eval tests, with two more of each.
CORPUS = [*EVAL_CORPUS, ("everest", "Everest", "Mount Everest is the highest mountain on Earth, in the Himalayas."),
          ("tokyo", "Tokyo", "Tokyo is the capital of Japan.")]
QUESTIONS = [*EVAL_QUESTIONS, {"id": "q5", "question": "What is the highest mountain?", "golden_answers": ["Everest"]},
             {"id": "q6", "question": "What is the capital of Japan?", "golden_answers": ["Tokyo"]}]


RAY_AUTH = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A Ray head node on 127.0.0.1 with 2 CPUs and Ray's token authentication on; its workers import
    this tree's Winnow and share the tests' call cache (the head hands its environment to them).
    Yields HOST:PORT.

    Nothing comes from the user's home: HOME is a temporary folder, and it holds a stale
    ``~/.ray/auth_token`` (what an earlier local ``ray.init()`` leaves), so the tests show that the
    driver sends the cluster's token, given as Ray documents it (``RAY_AUTH_TOKEN``), with
    ``RAY_AUTH_MODE`` left unset on the driver's side as a user would."""
    home = tmp_path_factory.mktemp("home")
    (home / ".ray").mkdir()
    (home / ".ray" / "auth_token").write_text("stale-token-of-another-cluster")
    token = "winnow-test-" + os.urandom(8).hex()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WINNOW_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "winnow-cache"))
        patch.setenv("HOME", str(home))
        for name in RAY_AUTH:
            patch.delenv(name, raising=False)
        patch.setenv("RAY_AUTH_TOKEN", token)  # the drivers' (winnow eval's) token
        with ray_head(cpus=2, env={"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}) as address:
            yield address


def winnow(*args, check=True):
    """``winnow ARGS``: a run on the Ray engine in a subprocess of its own (its driver joins a cluster,
    which the test process must not), anything else in this process."""
    return eval_winnow(*args, check=check, process="ray" in map(str, args))


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    return make_bench(tmp_path_factory.mktemp("ray-bench"), CORPUS, QUESTIONS)


def eval_args(bench, out, *extra, server=None, queries=None):
    """rankrag over the bench (or ``queries``) with no call cache, so every answer is computed (and a
    kill lands mid-run): on SmolLM2 through llama.cpp in each worker, or with ``server`` on that
    loopback server."""
    model = ["--backend", "openai", "--model", "m", "--base-url", server.url] if server else ["--model", MODEL]
    return ["eval", "--index", bench / "idx", "--queries", queries or bench / "qa.jsonl", *model,
            "--method", "rankrag", "--n", "4", "--k", "2", "--no-cache", "--out", out, *extra]


@pytest.fixture(scope="module")
def slow_server():
    """A loopback OpenAI-compatible server taking half a second a call: a question takes a second or
    more, so a kill after the first answer lands mid-run. The kill tests are about the engine (what is
    lost, what is asked again), which a model in every worker would only make slower to show."""
    server = ScriptedServer(delay=0.5)
    yield server
    server.stop()


def records(folder: Path) -> list[dict]:
    return read_lines(folder / "answers.jsonl")


def answers_of(folder: Path) -> dict[str, tuple]:
    """Per question what the method decided: the answer, and every stage's ranked ids and scores."""
    return {r["id"]: (r["answer"], r["final"]["ids"],
                      [(s["stage"], s["ids"], [round(x, 3) for x in s.get("scores", [])]) for s in r["stages"]])
            for r in records(folder)}


@pytest.mark.subprocess
@pytest.mark.llm
def test_ray_workers_give_the_answers_of_the_single_process_engine(cluster, bench, tmp_path):
    local, sharded = tmp_path / "local", tmp_path / "ray"
    # Four of the questions, one a batch: each worker takes more than one batch, for 16 model calls a run.
    asked = QUESTIONS[:4]
    queries = tmp_path / "four.jsonl"
    queries.write_text("".join(json.dumps(q) + "\n" for q in asked))
    winnow(*eval_args(bench, local, queries=queries))
    result = winnow(*eval_args(bench, sharded, "--engine", "ray", "--ray-address", cluster, "--ray-workers", "2",
                               "--batch-size", "1", queries=queries))
    assert "Ray: 2 worker(s)" in result.stderr and "4 questions answered" in result.stderr
    assert sorted(answers_of(sharded)) == [q["id"] for q in asked]  # each once, in the order batches returned
    assert answers_of(sharded) == answers_of(local)
    metrics = [json.loads((folder / "metrics.json").read_text()) for folder in (local, sharded)]
    assert metrics[0]["answer"] == metrics[1]["answer"] and metrics[1]["questions"]["answered"] == 4
    config = json.loads((sharded / "config.json").read_text())
    # The workers' model is checked and recorded as the single-process engine records its own.
    assert config["models"] == json.loads((local / "config.json").read_text())["models"]
    command = config["sessions"][-1]["command"]
    assert command[command.index("--engine") + 1] == "ray"


@pytest.mark.subprocess
def test_a_killed_ray_driver_resumes_without_losing_or_repeating_a_question(cluster, bench, slow_server, tmp_path):
    out = tmp_path / "run"
    args = eval_args(bench, out, "--engine", "ray", "--ray-address", cluster, "--ray-workers", "2",
                     "--batch-size", "1", server=slow_server)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    driver = subprocess.Popen([sys.executable, "-m", "winnow.cli", *map(str, args)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=env)
    answers = out / "answers.jsonl"
    deadline = time.monotonic() + 300
    while not (answers.is_file() and answers.read_bytes().count(b"\n") >= 1):
        assert driver.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    before = answers.read_bytes()
    finished = before.count(b"\n")
    assert 1 <= finished < len(QUESTIONS)
    assert not (out / "metrics.json").exists()

    # The killed driver's workers went with it, so the cluster's 2 CPUs are free for the new ones.
    result = winnow(*args)
    assert f"{finished} already answered, {len(QUESTIONS) - finished} to ask" in result.stderr
    after = answers.read_bytes()
    assert after.startswith(before)  # nothing answered before the kill was rewritten
    ids = [r["id"] for r in records(out)]
    assert sorted(ids) == [q["id"] for q in QUESTIONS]  # 0 lost, 0 twice
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["questions"]["answered"] == len(QUESTIONS) and metrics["questions"]["remaining"] == 0


@pytest.mark.subprocess
@pytest.mark.llm
def test_cached_answers_the_workers_asked_again_are_reported_by_the_driver(cluster, bench, tmp_path):
    # One question no other test of the cache asks, so only this test's calls are turned stale.
    (tmp_path / "one.jsonl").write_text(json.dumps(QUESTIONS[-2]) + "\n")
    args = ["eval", "--index", bench / "idx", "--queries", tmp_path / "one.jsonl", "--model", MODEL,
            "--method", "rankrag", "--n", "3", "--k", "1", "--max-answer-tokens", "4"]
    cache = Path(os.environ["WINNOW_CACHE_DIR"])
    before = cached_choice_keys(cache) if (cache / "llm-calls.sqlite").exists() else set()
    winnow(*args, "--out", tmp_path / "here")
    judged = len(read_lines(tmp_path / "here" / "answers.jsonl")[0]["first_stage"]["ids"])
    assert poison_cached_judgements(cache, keep=before) == judged >= 1
    again = winnow(*args, "--out", tmp_path / "ray", "--engine", "ray", "--ray-address", cluster, "--ray-workers", "1")
    assert f"call cache: {judged} cached answer(s) written by an older Winnow were unusable" in again.stderr
    cost = json.loads((tmp_path / "ray" / "metrics.json").read_text())["cost"]
    assert (cost["llm_calls"], cost["cache_hits"]) == (judged, 1)  # the judgements asked again, the answer cached


def worker_pids() -> list[int]:
    """Processes of live Ray actors running a QuestionWorker (Ray names them in their command line)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if b"ray::QuestionWorker" in cmdline.read_bytes():
                pids.append(int(cmdline.parent.name))
        except OSError:
            continue
    return pids


@pytest.mark.subprocess
def test_a_worker_killed_mid_run_fails_only_its_batches_and_the_rerun_asks_them(cluster, bench, slow_server,
                                                                                tmp_path):
    out = tmp_path / "run"
    args = eval_args(bench, out, "--engine", "ray", "--ray-address", cluster, "--ray-workers", "2",
                     "--batch-size", "1", server=slow_server)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    driver = subprocess.Popen([sys.executable, "-m", "winnow.cli", *map(str, args)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, env=env)
    answers = out / "answers.jsonl"
    deadline = time.monotonic() + 300
    while not (answers.is_file() and answers.read_bytes().count(b"\n") >= 1 and len(worker_pids()) == 2):
        assert driver.poll() is None, "the run ended before a worker could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(worker_pids()[0], signal.SIGKILL)  # as a node lost or the OOM killer would
    _, stderr = driver.communicate(timeout=300)
    # The other worker finished the run; the lost questions make it incomplete, which the exit says.
    assert driver.returncode == 3 and "remain unanswered" in stderr, stderr
    errors = read_lines(out / "errors.jsonl")
    lost = {e["id"] for e in errors}
    assert 1 <= len(lost) <= 2 and all("its Ray worker died" in e["error"] for e in errors)  # its queued batches
    first = [r["id"] for r in records(out)]
    assert sorted(first + sorted(lost)) == [q["id"] for q in QUESTIONS]  # every question answered or failed, once

    result = winnow(*args)
    assert f"{len(first)} already answered, {len(lost)} to ask" in result.stderr
    ids = [r["id"] for r in records(out)]
    assert sorted(ids) == [q["id"] for q in QUESTIONS]  # 0 lost, 0 twice
    assert json.loads((out / "metrics.json").read_text())["questions"]["remaining"] == 0


@pytest.mark.subprocess
def test_a_worker_that_cannot_open_the_run_is_one_line(cluster, bench, tmp_path):
    result = winnow("eval", "--index", bench / "idx", "--queries", bench / "qa.jsonl", "--model", "no-such-model",
                    "--out", tmp_path / "run", "--engine", "ray", "--ray-address", cluster, "--ray-workers", "1",
                    check=False)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: the Ray worker on ") and "unknown model 'no-such-model'" in lines[-1]
    assert "Traceback" not in result.stderr
    # More workers than the cluster's 2 CPUs hold would wait for ever: refused, naming the numbers.
    crowded = winnow("eval", "--index", bench / "idx", "--queries", bench / "qa.jsonl", "--out", tmp_path / "run2",
                     "--engine", "ray", "--ray-address", cluster, "--ray-workers", "3", check=False)
    assert crowded.returncode == 2 and "3 Ray worker(s) of 1 CPU need 3 CPUs; the cluster has 2" in crowded.stderr


@pytest.mark.subprocess
def test_engine_options_are_checked_before_anything_runs(bench, tmp_path):
    base = ["eval", "--index", bench / "idx", "--queries", bench / "qa.jsonl", "--out", tmp_path / "run"]
    unknown = winnow(*base, "--engine", "spark", check=False)
    assert unknown.returncode == 2 and "--engine 'spark' is not one of local, ray" in unknown.stderr
    stray = winnow(*base, "--ray-workers", "2", check=False)
    assert stray.returncode == 2 and "--ray-workers only apply with --engine ray" in stray.stderr
    nobody = winnow(*base, "--engine", "ray", "--ray-address", f"127.0.0.1:{free_port()}", check=False)
    assert nobody.returncode == 2 and "no Ray cluster answers there" in nobody.stderr
    assert not (tmp_path / "run").exists()  # refused before the run folder was made


@pytest.mark.subprocess
def test_ray_workers_with_token_authentication_answer_as_the_local_engine(cluster, bench, tmp_path):
    """The cluster has token authentication on and HOME holds a stale token: the driver, given the
    cluster's token as RAY_AUTH_TOKEN, joins it, and its workers (clients of a model server here, so
    no model loads) give the answers of the single-process engine. The worker's questions flow, its
    two batches of 3 at once (a server-backed worker takes two callers)."""
    from fault_server import FaultServer

    server = FaultServer()
    try:
        args = ["eval", "--index", bench / "idx", "--queries", bench / "qa.jsonl", "--backend", "openai", "--model",
                "m", "--base-url", server.url, "--method", "rankrag", "--n", "4", "--k", "2", "--no-cache"]
        winnow(*args, "--out", tmp_path / "local")
        result = winnow(*args, "--out", tmp_path / "ray", "--engine", "ray", "--ray-address", cluster,
                        "--ray-workers", "1", "--batch-size", "3")
    finally:
        server.stop()
    assert "6 questions answered" in result.stderr
    assert answers_of(tmp_path / "ray") == answers_of(tmp_path / "local")
    # (A driver sending the stale token instead is refused in one line naming RAY_AUTH_TOKEN, but Ray
    # retries for 20 s before it gives up: checked by hand, not here.)


@pytest.mark.subprocess
def test_a_signal_stops_a_ray_run_as_it_stops_the_other_engines(cluster, bench, tmp_path):
    """``kill -INT`` of a driver started with SIGINT ignored (``nohup … &``) stops it as it stops the
    other engines (tests/test_eval_stop.py): the stopping line at once, the answers kept, exit 130.
    The workers' calls hang at the server, so the driver is waiting on them when the signal comes."""
    from fault_server import FaultServer

    server = FaultServer(hang_word="Passage")
    out = tmp_path / "run"
    args = ["eval", "--index", bench / "idx", "--queries", bench / "qa.jsonl", "--backend", "openai", "--model", "m",
            "--base-url", server.url, "--method", "rankrag", "--n", "4", "--k", "2", "--no-cache", "--out", out,
            "--engine", "ray", "--ray-address", cluster, "--ray-workers", "1"]
    driver = subprocess.Popen([sys.executable, "-m", "winnow.cli", *map(str, args)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(SRC)},
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + 300
        while server.hung < 1:
            assert driver.poll() is None and time.monotonic() < deadline, driver.communicate(timeout=10)
            time.sleep(0.05)
        time.sleep(1)
        driver.send_signal(signal.SIGINT)
        _, stderr = driver.communicate(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        server.stop()
    said = " ".join(stderr.split())
    assert driver.returncode == 130, stderr
    assert f"stopping: waiting for the calls in flight to be cancelled; the answers so far are saved in {out}" in said
    assert "run the same command again to continue" in said and "Traceback" not in stderr
    deadline = time.monotonic() + 30
    while worker_pids() and time.monotonic() < deadline:  # Ray ends a killed actor's process soon after
        time.sleep(0.2)
    assert not worker_pids()  # the workers went with the stopped run


def test_the_driver_turns_token_mode_on_when_a_token_is_at_hand(tmp_path):
    from winnow.evaluation.ray_engine import token_auth_mode

    assert token_auth_mode({}, tmp_path) is None  # no token anywhere: Ray's own default
    assert token_auth_mode({"RAY_AUTH_TOKEN": "t"}, tmp_path) == "token"
    assert token_auth_mode({"RAY_AUTH_TOKEN_PATH": "/x"}, tmp_path) == "token"
    assert token_auth_mode({"RAY_AUTH_MODE": "disabled", "RAY_AUTH_TOKEN": "t"}, tmp_path) is None  # the user's word
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("t")  # what any local ray.init() leaves, and ray start reads
    assert token_auth_mode({}, tmp_path) == "token"


# --- winnow index --dense --engine ray: the passages embedded by the cluster's workers ---------------
# On the same cluster (its start-up is the cost): two workers, each with the packaged MiniLM (int8 ONNX).

ENCODING_SHARD_ROWS = 8  # 40 passages: five shards, so both workers get some
# The driver runs in a process of its own, as `winnow index` would: this one imported Ray before the
# cluster's token mode was known, and Ray reads it on import.
ENCODE_ON_RAY = """
import json, sys
from winnow.index import add_dense_embeddings, load_embedder
from winnow.index.ray_encoding import RayEncoding
rates = []
add_dense_embeddings(sys.argv[1], embedder=load_embedder(threads=1), shard_rows=int(sys.argv[3]), progress=False,
                     ray=RayEncoding(address=sys.argv[2], workers=2), rates=rates)
print(json.dumps([[r.host, r.shards, r.passages, r.passages_per_second] for r in rates]))
"""


@pytest.mark.subprocess
def test_ray_workers_resume_a_killed_encoding_and_write_the_single_process_embeddings(cluster, tmp_path):
    import shutil

    import numpy as np
    from small_corpus import PASSAGES

    from winnow.errors import WinnowError
    from winnow.index import build_bm25_index, load_embedder
    from winnow.index.embedding_shards import embed_in_shards, local_runner, work_folder
    from winnow.index.store import PassageStore
    from winnow.records import Passage

    passages = [Passage(f"{p['id']}-{n}", f"{p['text']} ({'abcde'[n]} {n * 7})", title=p["title"])
                for n in range(5) for p in PASSAGES]  # 40 distinct passages
    bm25 = build_bm25_index(passages, tmp_path / "bm25", source="test", source_checksum="x", progress=False)
    embedder = load_embedder(threads=1)
    index = shutil.copytree(bm25, tmp_path / "ray")

    # A run killed after two of its five shards (by whichever engine: the shards are the same files).
    store = PassageStore.open(index, len(passages), "rebuild")
    single = local_runner(store, embedder)
    with pytest.raises(WinnowError, match="3 embedding shard"):
        embed_in_shards(store, embedder, work_folder(index), shard_rows=ENCODING_SHARD_ROWS,
                        runner=lambda pending, progress: single(pending[:2], progress))
    done = subprocess.run([sys.executable, "-c", ENCODE_ON_RAY, str(index), cluster, str(ENCODING_SHARD_ROWS)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(SRC)})
    assert done.returncode == 0, done.stderr
    assert "resumed: 2 of 5 embedding shards were already done" in done.stderr
    rates = json.loads(done.stdout.strip().splitlines()[-1])  # [worker, shards, passages, passages/s]
    assert sum(r[2] for r in rates) == 3 * ENCODING_SHARD_ROWS and sum(r[1] for r in rates) == 3  # the 3 missing
    assert len(rates) == 2 and all(r[3] > 0 for r in rates)  # an encoder per worker, both used
    stored = np.load(index / "dense" / "embeddings.npy").astype(np.float32)
    assert np.allclose(stored, embedder.embed_passages(passages), atol=2e-3)  # the single process's, as float16
    assert not work_folder(index).exists()  # the shards are gone once the index holds them


def test_winnow_index_engine_options_are_checked_before_anything_is_read(tmp_path):
    from typer.testing import CliRunner

    from winnow.cli import app
    from winnow.errors import WinnowError
    from winnow.index.ray_encoding import RayEncoding

    def refused(*args):
        result = CliRunner().invoke(app, ["index", str(tmp_path / "nothing.jsonl"), "--out", str(tmp_path / "i"),
                                          *args])
        assert isinstance(result.exception, WinnowError), result.output
        return str(result.exception)

    assert "add --dense" in refused("--engine", "ray")
    assert "--ray-workers only apply with --engine ray" in refused("--dense", "--ray-workers", "2")
    assert "'spark' is not one of local, ray" in refused("--dense", "--engine", "spark")
    assert "no Ray cluster answers there" in refused("--dense", "--engine", "ray", "--ray-address",
                                                     f"127.0.0.1:{free_port()}")
    with pytest.raises(WinnowError, match="must be at least 1"):
        RayEncoding(workers=0)


def test_a_worker_reading_other_passages_is_refused_in_one_line_through_ray_s_wrapping(tmp_path):
    """What each actor runs, called here without Ray: a shard whose passages are not the driver's (its
    file name carries their digest) is refused, and the driver finds that refusal inside Ray's wrappers."""
    import numpy as np
    from small_corpus import PASSAGES

    from winnow.errors import WinnowError
    from winnow.index import build_bm25_index, load_embedder
    from winnow.index.ray_encoding import ShardEncoder, winnow_cause
    from winnow.records import Passage

    index = build_bm25_index([Passage(p["id"], p["text"], title=p["title"]) for p in PASSAGES], tmp_path / "index",
                             source="test", source_checksum="x", progress=False)
    worker = ShardEncoder(str(index), len(PASSAGES), load_embedder(threads=1).identity, threads=1)
    batch = {"shard": np.array([0]), "start": np.array([0]), "stop": np.array([4]),
             "path": np.array([str(tmp_path / "000000-0123456789abcdef.npy")])}
    with pytest.raises(WinnowError, match="reads other passages") as refused:
        worker(batch)
    assert not (tmp_path / "000000-0123456789abcdef.npy").exists()

    class RayTaskError(Exception):  # the shape of Ray's wrappers: the task's exception as .cause
        def __init__(self, cause):
            super().__init__("ray traceback…")
            self.cause = cause

    try:
        try:
            raise RayTaskError(refused.value)
        except RayTaskError as wrapped:
            raise RuntimeError("UserCodeException") from wrapped
    except RuntimeError as outer:
        assert winnow_cause(outer) is refused.value
    assert winnow_cause(RuntimeError("no winnow error")) is None
