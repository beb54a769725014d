"""A precomputed first-stage run (TREC, rank_llm's JSON/JSONL, FlashRAG's cache) served over an index."""

from __future__ import annotations

import json

import pytest
from test_index import TOPICS, build

from winnow.datasets.trec import write_run
from winnow.errors import InputError, WinnowError
from winnow.index import BM25Index
from winnow.index.precomputed import PrecomputedRun, read_first_stage_run
from winnow.records import Query

QUERIES = [Query("ice that moves", id="q1"), Query("a game on a board", id="q2"), Query("planet rings", id="q3")]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "index"
    build(out)
    return out


def bm25_lists(built, k=5):
    return BM25Index.open(built).search_many(QUERIES, k)


def test_a_trec_run_of_bm25_serves_the_same_rankings(built, tmp_path):
    expected = bm25_lists(built)
    path = tmp_path / "bm25.trec"
    write_run({q.id: [(c.passage.id, c.score) for c in hits] for q, hits in zip(QUERIES, expected, strict=True)},
              path)
    served = PrecomputedRun.open(built, path)
    assert served.run.format == "trec" and len(served) == len(TOPICS)
    for query, hits in zip(QUERIES, expected, strict=True):
        got = served.search(query, k=5)
        assert [c.passage for c in got] == [c.passage for c in hits]  # the passages themselves, from the store
        assert [c.score_of("run") for c in got] == pytest.approx([c.score for c in hits])
        assert [s.rank for c in got for s in c.scores] == list(range(1, len(hits) + 1))
    assert [c.passage.id for c in served.search(QUERIES[0], k=2)] == [c.passage.id for c in expected[0]][:2]
    assert served.summary() == ""


def test_rank_llm_json_and_jsonl_are_read_in_their_order(built, tmp_path):
    requests = [{"query": {"text": "ice", "qid": 1}, "candidates": [
        {"docid": "glacier", "score": 3.5, "doc": {"contents": "…"}}, {"docid": "saturn", "score": 1.0, "doc": {}}]}]
    as_json = tmp_path / "requests.json"
    as_json.write_text(json.dumps(requests, indent=2))
    as_jsonl = tmp_path / "requests.jsonl"
    as_jsonl.write_text("".join(json.dumps(r) + "\n" for r in requests))
    for path in (as_json, as_jsonl):
        served = PrecomputedRun.open(built, path)
        assert served.run.format == "rank_llm"
        assert [(c.passage.id, c.score) for c in served.search(Query("ice", id="1"))] == [("glacier", 3.5),
                                                                                          ("saturn", 1.0)]


def test_a_flashrag_cache_is_looked_up_by_query_text(built, tmp_path):
    path = tmp_path / "retrieval_cache.json"
    path.write_text(json.dumps({"which cat is largest?": [{"id": "tiger", "contents": "…", "score": 12.5},
                                                          {"id": "chess", "contents": "…", "score": 2}]}))
    served = PrecomputedRun.open(built, path)
    assert served.run.format == "flashrag" and served.run.keyed_by == "text"
    assert [c.passage.id for c in served.search("which cat is largest?")] == ["tiger", "chess"]


def test_documents_missing_from_the_index_are_dropped_counted_and_named(built, tmp_path):
    path = tmp_path / "run.trec"
    path.write_text("q1 Q0 gone-1 1 9 t\nq1 Q0 glacier 2 8 t\nq1 Q0 gone-2 3 7 t\nq2 Q0 chess 1 5 t\nq2 Q0 gone-3 2 4 t\n"
                    "q2 Q0 gone-4 3 3 t\n")
    served = PrecomputedRun.open(built, path)
    assert [c.passage.id for c in served.search(QUERIES[0])] == ["glacier"]
    assert [s.rank for c in served.search(QUERIES[0]) for s in c.scores] == [1]
    served.search(QUERIES[1])
    assert served.unknown == {"q1": ["gone-1", "gone-2"], "q2": ["gone-3", "gone-4"]}
    assert served.summary() == (f"4 documents of {path} ('gone-1', 'gone-2', 'gone-3', and 1 more) in the rankings "
                                "of 2 queries are not in the index: dropped from their rankings; the most a query "
                                "lost: 2 of 3 ('q1')")


def test_a_query_left_with_no_passage_is_counted_in_the_summary(built, tmp_path):
    path = tmp_path / "run.trec"
    path.write_text("q1 Q0 gone-1 1 9 t\nq2 Q0 chess 1 5 t\n")
    served = PrecomputedRun.open(built, path)
    assert len(served.search(QUERIES[0])) == 0
    served.search(QUERIES[1])
    assert "1 query was left with no passage" in served.summary()


def test_a_run_naming_no_passage_of_the_index_is_refused_naming_it(built, tmp_path):
    path = tmp_path / "other.trec"
    path.write_text("q1 Q0 doc-1 1 9 t\nq1 Q0 doc-2 2 8 t\nq2 Q0 doc-3 1 5 t\n")
    with pytest.raises(WinnowError, match=r"other\.trec: none of the 3 documents the run names .* is a passage "
                                          r"of the index"):
        PrecomputedRun.open(built, path)


def test_a_query_the_run_lacks_is_an_error_naming_it(built, tmp_path):
    path = tmp_path / "run.trec"
    path.write_text("q1 Q0 glacier 1 8 t\n")
    served = PrecomputedRun.open(built, path)
    with pytest.raises(WinnowError, match="the run has no ranking for query id 'q2'"):
        served.search(QUERIES[1])
    with pytest.raises(WinnowError, match="looked up by query id, and the query 'free text' has none"):
        served.search("free text")


@pytest.mark.parametrize(("content", "message"), [
    ("", "the run is empty"),
    ("q1 Q0 d 1\n", "line 1: expected 6 fields"),
    ('[{"query": {"text": "x"}, "candidates": []}]', "request 1: query.qid must be"),
    ('[{"query": {"text": "x", "qid": "a"}, "candidates": [{"score": 1}]}]', "request 1, rank 1: no 'docid'"),
    ('{"q": [{"id": "a"}, {"id": "a"}]}', "document 'a' is ranked twice"),
    ('{"q": [{"id": "a", "score": "high"}]}', "score must be a number"),
    ('{"q": [}', "not valid JSON"),
])
def test_a_malformed_run_is_refused_naming_the_place(tmp_path, content, message):
    path = tmp_path / "run.json"
    path.write_text(content)
    with pytest.raises(InputError, match=message):
        read_first_stage_run(path)


# --- winnow eval --run: the run Winnow wrote gives the same answers as retrieving --------------------

@pytest.mark.llm
def test_eval_given_its_own_first_stage_run_answers_as_when_retrieving(tmp_path):
    from test_evaluation import CORPUS, QUESTIONS, eval_args, make_bench, read_lines, winnow

    bench = make_bench(tmp_path, CORPUS, QUESTIONS)
    retrieved, replayed = tmp_path / "retrieved", tmp_path / "replayed"
    winnow(*eval_args(bench, retrieved, "--method", "vanilla", "--limit", "2"))
    result = winnow(*eval_args(bench, replayed, "--method", "vanilla", "--limit", "2",
                               "--run", retrieved / "runs" / "first_stage.trec"))
    assert "--run:" not in result.stderr  # every id of the run is in the index
    before, after = read_lines(retrieved / "answers.jsonl"), read_lines(replayed / "answers.jsonl")
    assert [r["id"] for r in after] == [r["id"] for r in before] == ["q1", "q2"]
    for old, new in zip(before, after, strict=True):
        assert new["answer"] == old["answer"] and new["final"]["ids"] == old["final"]["ids"]
        assert new["first_stage"]["ids"] == old["first_stage"]["ids"]
    assert read_lines(replayed / "answers.jsonl")[0]["stages"][0]["stage"] == "retrieve"

    missing = tmp_path / "missing.trec"
    missing.write_text("q1 Q0 paris 1 2 t\nq1 Q0 gone 2 1 t\n")
    failed = winnow(*eval_args(bench, tmp_path / "partial", "--method", "vanilla", "--limit", "2", "--run", missing),
                    check=False)
    assert "the run has no ranking for query id 'q2'" in failed.stderr


# --- winnow ask --run: one free-text question answered from a run's ranking ---------------------------

@pytest.fixture(scope="module")
def llm_server():
    from fault_server import FaultServer

    server = FaultServer()  # a real OpenAI-compatible server on loopback; answers are a function of the prompt
    yield server
    server.stop()


def ask(built, server, *extra):
    from typer.testing import CliRunner

    from winnow.cli import app

    return CliRunner().invoke(app, ["ask", "which ice moves", "--index", str(built), "--backend", "openai",
                                    "--base-url", server.url, "--model", "m", "--method", "vanilla", "--k", "2",
                                    "--no-cache", "--json", *map(str, extra)])


def test_ask_answers_from_the_run_s_ranking_for_the_question_id_given(built, llm_server, tmp_path):
    trec = tmp_path / "run.trec"
    write_run({"q1": [("saturn", 9.0), ("glacier", 8.0), ("chess", 7.0)], "q2": [("chess", 1.0)]}, trec)
    result = ask(built, llm_server, "--run", trec, "--qid", "q1")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert [p["id"] for p in answer["passages"]] == ["saturn", "glacier"]  # the run's order, not BM25's
    assert answer["settings"]["retriever"] == "run"

    for extra, message in ((("--run", trec), "give the question's id in the run with --qid ID"),
                           (("--run", trec, "--qid", "q9"), "the run has no ranking for query id 'q9'"),
                           (("--qid", "q1"), "--qid names the question in a --run file")):
        refused = ask(built, llm_server, *extra)
        assert isinstance(refused.exception, WinnowError), refused.output
        assert message in f"{refused.exception.message} {refused.exception.hint}"


def test_ask_finds_the_question_in_a_rank_llm_run_by_its_text(built, llm_server, tmp_path):
    path = tmp_path / "requests.jsonl"
    path.write_text(json.dumps({"query": {"text": "which ice moves", "qid": "7"},
                                "candidates": [{"docid": "glacier", "score": 2.0}, {"docid": "gone", "score": 1.5},
                                               {"docid": "chess", "score": 1.0}]}) + "\n")
    result = ask(built, llm_server, "--run", path)
    assert result.exit_code == 0, result.output
    assert [p["id"] for p in json.loads(result.stdout)["passages"]] == ["glacier", "chess"]
    assert "--run: 1 document" in result.stderr and "'gone'" in result.stderr  # counted and named, not hidden


def test_ask_refuses_a_run_naming_no_passage_of_the_index_with_a_non_zero_exit(built, llm_server, tmp_path):
    trec = tmp_path / "elsewhere.trec"
    write_run({"q1": [("doc-1", 9.0), ("doc-2", 8.0)]}, trec)
    result = ask(built, llm_server, "--run", trec, "--qid", "q1")
    assert result.exit_code != 0
    assert "elsewhere.trec: none of the 2 documents the run names ('doc-1', 'doc-2')" in str(result.exception)


def test_eval_given_its_own_run_files_fuses_as_when_retrieving(tmp_path):
    """The run files carry the scores the stages gave, so a run fed back with --run gives what score
    values drive (--fusion-alpha) the same results as retrieving; RankGPT against a server that ranks."""
    from fakes import ScriptedServer
    from test_evaluation import CORPUS, QUESTIONS, make_bench, read_lines, winnow

    from winnow.datasets.trec import read_run

    bench = make_bench(tmp_path, CORPUS, QUESTIONS)
    server = ScriptedServer(delay=0.0, ranking=True)

    def evaluate(out, *extra):
        return winnow("eval", "--index", bench / "idx", "--queries", bench / "qa.jsonl", "--out", out,
                      "--method", "rankgpt", "--n", "6", "--k", "3", "--fusion-alpha", "0.5", "--set", "window=4",
                      "--set", "step=2", "--backend", "openai", "--base-url", server.url, "--model", "m", "--no-cache",
                      *extra)
    try:
        retrieved = tmp_path / "retrieved"
        evaluate(retrieved)
        before = sorted(read_lines(retrieved / "answers.jsonl"), key=lambda r: r["id"])  # written as they finish
        for row in ("first_stage", "retrieve"):
            replayed = tmp_path / f"from-{row}"
            evaluate(replayed, "--run", retrieved / "runs" / f"{row}.trec")
            after = sorted(read_lines(replayed / "answers.jsonl"), key=lambda r: r["id"])
            assert [r["id"] for r in after] == [r["id"] for r in before] == ["q1", "q2", "q3", "q4"]
            for old, new in zip(before, after, strict=True):
                assert new["final"] == old["final"] and new["answer"] == old["answer"]
                fused = [(s["ids"], s["scores"]) for s in new["stages"] if s["stage"] == "fusion"]
                assert fused and fused == [(s["ids"], s["scores"]) for s in old["stages"] if s["stage"] == "fusion"]
    finally:
        server.stop()
    # The files hold the retriever's BM25 scores (not n+1-rank), and the fused ones.
    run = read_run(retrieved / "runs" / "first_stage.trec")
    for record in before:
        assert [score for _, score in run[record["id"]]] == record["first_stage"]["scores"]
        assert record["first_stage"]["scores"] != [float(len(run[record["id"]]) - i) for i in range(len(run[record["id"]]))]
    fusion = read_run(retrieved / "runs" / "fusion.trec")
    assert all([s for _, s in fusion[r["id"]]] == next(s["scores"] for s in r["stages"] if s["stage"] == "fusion")
               for r in before)
