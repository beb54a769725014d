"""Datasets: QA JSONL and TREC files, the data in Pyserini 0.21.0's jar, BEIR folders, ir_datasets,
the names-the-article rule and the wiki-vital QA build, all on real files."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import ir_measures
import pytest
from cli_runner import winnow as winnow_in_process

from winnow.answers import has_answer
from winnow.corpus import load_corpus
from winnow.datasets import (
    QAItem,
    dataset_specs,
    load_dataset,
    read_qa_jsonl,
    read_qrels,
    read_run,
    run_scores,
    write_qa_jsonl,
    write_qrels,
    write_run,
)
from winnow.datasets.catalog import QA_SPECS
from winnow.datasets.naming import ArticleNames, name_forms, normalise_phrase
from winnow.datasets.wiki_vital_qa import build_wiki_vital_qa, split_of
from winnow.errors import InputError, WinnowError

SRC = Path(__file__).resolve().parents[1] / "src"
# The full wiki-vital QA build, pinned (rules, corpus and question sets are all fixed versions): a
# change here means the benchmark changed, and docs/wiki-vital-qa.md must say so.
EXPECTED_WIKI_VITAL_QA = {"nq-test": {"dev": 22, "test": 73}, "triviaqa-test": {"dev": 159, "test": 394}}


def winnow(*args, env_dir, check=True, env=None):
    """``winnow ARGS`` in this process (tests/cli_runner.py); with ``env`` (the whole environment), in a
    subprocess of its own, so that a library reading it when imported (ir_datasets) reads it too."""
    if env is None:
        result = winnow_in_process(*args, env={"WINNOW_CACHE_DIR": str(env_dir), "COLUMNS": "200"})
    else:
        env = {**env, "WINNOW_CACHE_DIR": str(env_dir), "COLUMNS": "200"}
        result = subprocess.run([sys.executable, "-m", "winnow.cli", *args], capture_output=True, text=True,
                                env=env, timeout=300)
    if check and result.returncode != 0:
        raise AssertionError(f"winnow {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
    return result


# --- QA JSONL -------------------------------------------------------------------------------------

def test_qa_jsonl_round_trip_keeps_everything(tmp_path):
    items = [QAItem("q1", "Who painted the Mona Lisa?", ["Leonardo da Vinci", "Leonardo"], {"source": "x"}),
             QAItem("q2", "How tall is Everest?", [r"8,?848\s*m"], {"answer_type": "regex"}),
             QAItem("q3", "Ünïcode question?", [], {})]
    path = tmp_path / "qa.jsonl"
    assert write_qa_jsonl(items, path) == 3
    back = read_qa_jsonl(path)
    assert back == items
    assert [item.is_regex for item in back] == [False, True, False]
    assert not list(tmp_path.glob(".*tmp*"))  # the temporary file was renamed, not left behind


@pytest.mark.parametrize("line, field, message", [
    ('{"id": "b", "question": "q", "golden_answers": ["a"]', None, "not valid JSON"),
    ('{"id": "b", "golden_answers": ["a"]}', "question", "question must be a non-empty string"),
    ('{"id": "b", "question": "q", "golden_answers": "a"}', "golden_answers", "must be a list"),
    ('{"id": "b", "question": "q", "golden_answers": ["a", 3]}', "golden_answers", "golden_answers[1]"),
    ('{"id": "b", "question": "q", "golden_answers": [], "metadata": [1]}', "metadata", "metadata must be an object"),
    ('{"id": true, "question": "q", "golden_answers": []}', "id", "id must be"),
    ('{"id": "a", "question": "again", "golden_answers": []}', "id", "duplicate id 'a' (first at line 1)"),
])
def test_qa_jsonl_errors_name_file_line_and_field(tmp_path, line, field, message):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "a", "question": "fine", "golden_answers": ["x"]}\n\n' + line + "\n")
    with pytest.raises(InputError) as caught:
        read_qa_jsonl(path)
    assert caught.value.line == 3 and caught.value.field == field
    assert message in str(caught.value) and str(path) in str(caught.value)


def test_qa_writer_refuses_duplicate_ids_and_keeps_the_old_file(tmp_path):
    path = tmp_path / "qa.jsonl"
    write_qa_jsonl([QAItem("a", "q", ["x"])], path)
    with pytest.raises(InputError, match="duplicate id 'a'"):
        write_qa_jsonl([QAItem("a", "q", ["x"]), QAItem("a", "r", ["y"])], path)
    assert read_qa_jsonl(path) == [QAItem("a", "q", ["x"])]


# --- TREC qrels and runs ---------------------------------------------------------------------------

def test_qrels_and_run_round_trip_and_score_with_ir_measures(tmp_path):
    qrels = {"q1": {"d1": 2, "d2": 0}, "q2": {"d3": 1}}
    assert write_qrels(qrels, tmp_path / "qrels.txt") == 3
    assert (tmp_path / "qrels.txt").read_text().splitlines()[0] == "q1 0 d1 2"
    assert read_qrels(tmp_path / "qrels.txt") == qrels
    run = {"q1": [("d2", 3.5), ("d1", 1.25)], "q2": [("d3", 0.1), ("d9", -2.0)]}
    write_run(run, tmp_path / "run.txt", tag="bm25")
    assert (tmp_path / "run.txt").read_text().splitlines()[0] == "q1 Q0 d2 1 3.5 bm25"
    assert read_run(tmp_path / "run.txt") == run
    scores = ir_measures.calc_aggregate([ir_measures.RR @ 10], read_qrels(tmp_path / "qrels.txt"),
                                        run_scores(read_run(tmp_path / "run.txt")))
    assert scores[ir_measures.RR @ 10] == pytest.approx((1 / 2 + 1) / 2)  # q1: d1 at rank 2; q2: d3 at rank 1


def test_run_writer_keeps_the_given_order(tmp_path):
    tied = {"q": [("b", 1.0), ("a", 1.0), ("c", 0.5)]}
    with pytest.raises(WinnowError, match="trec_eval would reorder it"):
        write_run(tied, tmp_path / "run.txt")
    write_run(tied, tmp_path / "run.txt", scores_from_rank=True)
    back = read_run(tmp_path / "run.txt")
    assert back == {"q": [("b", 3.0), ("a", 2.0), ("c", 1.0)]}
    qrels = {"q": {"b": 1}}
    rr = ir_measures.RR @ 10
    # ir-measures orders by score and breaks ties by document id, not by the given order, so it puts
    # "a" first: only the rank-derived scores keep "b" where the ranking put it.
    assert ir_measures.calc_aggregate([rr], qrels, run_scores(tied))[rr] == 0.5
    assert ir_measures.calc_aggregate([rr], qrels, run_scores(back))[rr] == 1.0
    with pytest.raises(WinnowError, match="white space"):
        write_run({"q": [("doc 1", 1.0)]}, tmp_path / "bad.txt")
    with pytest.raises(WinnowError, match="ranked twice"):
        write_run({"q": [("a", 2.0), ("a", 1.0)]}, tmp_path / "bad.txt")
    assert not (tmp_path / "bad.txt").exists()


@pytest.mark.parametrize("reader, text, message", [
    (read_qrels, "q1 0 d1 1\nq1 0 d2\n", "expected 4 fields, got 3"),
    (read_qrels, "q1 0 d1 1\nq1 0 d2 high\n", "relevance must be an integer"),
    (read_qrels, "q1 0 d1 1\nq1 0 d1 2\n", "judged twice"),
    (read_run, "q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2 x t\n", "score must be a number"),
    (read_run, "q1 Q0 d1 1 2.0 t\nq1 Q0 d1 2 1.0 t\n", "ranked twice for query 'q1' (first at line 1)"),
    (read_run, "q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2 1.0 u\n", "tag 'u' differs from 't' (line 1)"),
    (read_run, "q1 Q0 d1 1 2.0 t\nq1 Q0 d2 two 1.0 t\n", "rank must be an integer"),
])
def test_trec_errors_name_the_line(tmp_path, reader, text, message):
    path = tmp_path / "file.txt"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        reader(path)
    assert caught.value.line == 2 and message in str(caught.value)


def test_run_reader_orders_by_rank_column(tmp_path):
    (tmp_path / "run.txt").write_text("q Q0 c 3 1.0 t\nq Q0 a 1 3.0 t\nq Q0 b 2 2.0 t\n")
    assert [doc for doc, _ in read_run(tmp_path / "run.txt")["q"]] == ["a", "b", "c"]


# --- Pyserini 0.21.0's jar ------------------------------------------------------------------------

@pytest.mark.parametrize("spec", QA_SPECS, ids=lambda spec: spec.name)
def test_qa_sets_have_their_published_sizes(spec):
    dataset = spec.load()
    assert len(dataset.questions) == spec.expected
    assert len({item.id for item in dataset.questions}) == spec.expected
    assert all(item.question.strip() and item.golden_answers for item in dataset.questions)
    assert all(item.is_regex == (spec.name == "curatedtrec-test") for item in dataset.questions)


def test_qa_samples_parse_as_written():
    nq = load_dataset("nq-test").questions
    assert nq[0] == QAItem("nq-test-0", "who got the first nobel prize in physics", ["Wilhelm Conrad Röntgen"],
                           {"dataset": "nq-test"})
    assert nq[1].golden_answers == ["May 18, 2018"]  # the untokenised file ("May 18 , 2018" in DPR's)
    nq_dev = load_dataset("nq-dev").questions
    assert nq_dev[0].question == "who sings does he love me with reba" and nq_dev[0].golden_answers == ["Linda Davis"]
    trivia = load_dataset("triviaqa-test").questions
    assert trivia[1].golden_answers == ["Scorpio", "Skorpio", "Scorpio (disambiguation)"]
    # CSV quoting: an answer list holding a double quote arrives whole, its quotes undoubled.
    quoted = [item for item in trivia if any('"' in answer for answer in item.golden_answers)]
    assert quoted and all(answer.strip() for item in quoted for answer in item.golden_answers)
    trivia_dev = load_dataset("triviaqa-dev").questions
    assert "Boxing" in trivia_dev[2].golden_answers  # a row whose answers field is CSV-quoted
    curated = load_dataset("curatedtrec-test").questions
    assert curated[1].question == "what Arthur Miller play recounts his marriage to Marilyn Monroe?"
    assert curated[1].metadata == {"dataset": "curatedtrec-test", "answer_type": "regex"}
    assert has_answer("In 1964 he wrote After the Fall.", curated[1].golden_answers, regex=True)
    assert has_answer("Denali rises 20,310 feet; older sources give 20,320 feet.", curated[0].golden_answers,
                      regex=True)


def test_beir_and_dl_topics_with_qrels():
    specs = {spec.name: spec for spec in dataset_specs()}
    beir = [name for name in specs if name.startswith("beir/")]
    assert len(beir) == 29 and {"beir/scifact", "beir/nfcorpus", "beir/trec-covid", "beir/nq"} <= set(beir)
    scifact = load_dataset("beir/scifact")
    assert len(scifact.questions) == 300 and scifact.judged == 300
    assert scifact.questions[0].question == "0-dimensional biomaterials show inductive properties."
    assert scifact.qrels["1"] == {"31715818": 1}
    assert sum(len(judged) for judged in scifact.qrels.values()) == 339
    dl19, dl20 = load_dataset("dl19-passage"), load_dataset("dl20-passage")
    assert (len(dl19.questions), dl19.judged) == (43, 43)
    assert (len(dl20.questions), dl20.judged) == (200, 54)
    assert dl19.questions[0].question == "do goldfish grow"
    assert max(grade for judged in dl19.qrels.values() for grade in judged.values()) == 3  # graded 0-3


def test_unknown_name_suggests_close_ones():
    with pytest.raises(WinnowError, match="did you mean nq-test"):
        load_dataset("nq-tst")


@pytest.mark.subprocess
def test_missing_pyserini_and_ir_datasets_say_how_to_install(tmp_path):
    # -S leaves site-packages (so pyserini and ir_datasets) off the path: a machine without them.
    code = ("import sys; sys.path.insert(0, sys.argv[1])\n"
            "from winnow.datasets import load_dataset\n"
            "from winnow.errors import WinnowError\n"
            "for name in ('nq-test', 'irds:beir/scifact/test'):\n"
            "    try:\n        load_dataset(name)\n    except WinnowError as error:\n        print(error)\n")
    result = subprocess.run([sys.executable, "-S", "-c", code, str(SRC)], capture_output=True, text=True,
                            timeout=60, cwd=tmp_path)
    lines = result.stdout.splitlines()
    assert len(lines) == 2, result.stderr
    assert "pip install --no-deps pyserini==0.21.0" in lines[0]
    assert "needs the 'data' extra: pip install 'winnow-rag[data]'" in lines[1] and "ir_datasets is not installed" in lines[1]


# --- BEIR folders and ir_datasets -----------------------------------------------------------------

def write_beir_folder(folder: Path) -> Path:
    (folder / "qrels").mkdir(parents=True)
    corpus = [{"_id": "d1", "title": "Mona Lisa", "text": "A portrait painted by Leonardo da Vinci."},
              {"_id": "d2", "title": "Nile", "text": "The Nile flows north into the Mediterranean Sea."},
              {"_id": "d3", "title": "Everest", "text": "Mount Everest is Earth's highest mountain."}]
    queries = [{"_id": "q1", "text": "who painted the mona lisa"}, {"_id": "q2", "text": "where does the nile flow"},
               {"_id": "q3", "text": "highest mountain"}]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(record) + "\n" for record in corpus))
    (folder / "queries.jsonl").write_text("".join(json.dumps(record) + "\n" for record in queries))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq3\td3\t2\nq3\td2\t0\n")
    (folder / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq2\td2\t1\n")
    return folder


def test_beir_folder_questions_are_the_judged_queries_of_the_split(tmp_path):
    folder = write_beir_folder(tmp_path / "tiny")
    test = load_dataset(str(folder))
    assert [item.id for item in test.questions] == ["q1", "q3"]
    assert test.qrels == {"q1": {"d1": 1}, "q3": {"d3": 2, "d2": 0}}
    assert test.questions[0] == QAItem("q1", "who painted the mona lisa", [], {"dataset": "tiny/test"})
    dev = load_dataset(str(folder), split="dev")
    assert [item.id for item in dev.questions] == ["q2"]
    assert [p.id for p in load_corpus(folder).passages] == ["d1", "d2", "d3"]  # the corpus, read by winnow.corpus
    with pytest.raises(WinnowError, match="splits here: dev, test"):
        load_dataset(str(folder), split="train")


def test_beir_folder_qrels_for_unknown_queries_are_an_error(tmp_path):
    folder = write_beir_folder(tmp_path / "tiny")
    with (folder / "qrels" / "test.tsv").open("a") as stream:
        stream.write("q9\td1\t1\n")
    with pytest.raises(InputError, match="1 judged query ids are not in queries.jsonl, e.g. 'q9'"):
        load_dataset(str(folder))


def test_ir_datasets_reads_beir_files(tmp_path):
    """ir_datasets' own BEIR readers over files the test writes, registered under a local name."""
    import ir_datasets
    from ir_datasets.datasets.base import Dataset
    from ir_datasets.datasets.beir import BeirQrels, BeirQueries
    from ir_datasets.datasets.dpr_w100 import DprW100Query
    from ir_datasets.formats import GenericQuery
    from ir_datasets.util import LocalDownload

    folder = write_beir_folder(tmp_path / "tiny")
    (folder / "qa-queries.jsonl").write_text(json.dumps(
        {"_id": "q1", "text": "who painted the mona lisa", "metadata": {"answers": ["Leonardo da Vinci"]}}) + "\n")
    name = f"winnow-test/{tmp_path.name}"
    ir_datasets.registry.register(f"{name}/test", Dataset(
        BeirQueries("tiny", LocalDownload(folder / "queries.jsonl"), GenericQuery),
        BeirQrels(LocalDownload(folder / "qrels" / "test.tsv"), {})))
    ir_datasets.registry.register(f"{name}/qa", Dataset(
        BeirQueries("tiny", LocalDownload(folder / "qa-queries.jsonl"), DprW100Query)))
    test = load_dataset(f"irds:{name}/test")
    assert test.kind == "retrieval" and [item.id for item in test.questions] == ["q1", "q2", "q3"]
    assert test.qrels == {"q1": {"d1": 1}, "q3": {"d3": 2, "d2": 0}} and test.judged == 2
    qa = load_dataset(f"irds:{name}/qa")
    assert qa.kind == "qa" and qa.qrels is None
    assert qa.questions == [QAItem("q1", "who painted the mona lisa", ["Leonardo da Vinci"],
                                   {"dataset": f"{name}/qa"})]
    with pytest.raises(WinnowError, match="ir_datasets has no dataset 'winnow-test/none'"):
        load_dataset("irds:winnow-test/none")


@pytest.mark.subprocess
def test_ir_datasets_offline_is_a_clear_error(tmp_path):
    # A proxy on a closed port makes every download fail for real, as on a machine with no network.
    env = {**os.environ, "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
           "IR_DATASETS_HOME": str(tmp_path / "irds-home")}
    env.pop("NO_PROXY", None)
    env.pop("no_proxy", None)
    result = winnow("data", "export", "irds:beir/scifact/test", "--out", str(tmp_path / "x.jsonl"), env_dir=tmp_path,
                    check=False, env=env)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "ir_datasets could not fetch 'beir/scifact/test'" in result.stderr
    assert "check the network connection" in result.stderr


# --- naming rule and split --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def wiki_vital():
    return load_corpus("wiki-vital").passages


@pytest.fixture(scope="module")
def names(wiki_vital):
    return ArticleNames(wiki_vital)


def test_name_forms():
    assert normalise_phrase("A Doll's House — Notre-Dame, Córdoba") == "a doll s house notre dame cordoba"
    assert name_forms("Casablanca (film)") == ["casablanca film", "casablanca"]
    assert name_forms("Nashville, Tennessee") == ["nashville tennessee", "nashville"]
    assert name_forms("The Good, the Bad and the Ugly") == ["the good the bad and the ugly",
                                                            "good the bad and the ugly"]
    assert name_forms("The Last Supper (Leonardo)") == ["the last supper leonardo", "the last supper",
                                                        "last supper leonardo", "last supper"]


def test_everyday_words_do_not_name_articles(names):
    assert names.refused["water"] == names.refused["planet"] == names.refused["number"] == "common word"
    assert names.refusal("the who") == "common word"  # "who" once its article is dropped
    assert names.refusal("paris") is None and names.refusal("beatles") is None  # capitalised: names
    assert names.refusal("indium") is None and names.refusal("the doors") is None  # rare terms name their article
    assert names.refusal("north sea") is None  # the rule is for single words only
    assert names.refused["ur"] == "too short"


def test_longest_name_wins(names):
    named = names.named_in("When did New York City become the capital?")
    assert [(match.article_id, match.form) for match in named] == [("New_York_City", "new york city")]
    assert {match.article_id for match in names.named_in("who starred in casablanca")} == {"Casablanca",
                                                                                          "Casablanca_(film)"}
    assert names.named_in("what is the boiling point of water") == []


def test_split_is_a_stable_hash_of_id_and_seed():
    ids = [f"q{i}" for i in range(2000)]
    splits = [split_of(i) for i in ids]
    assert splits == [split_of(i) for i in ids]
    assert 0.26 < splits.count("dev") / len(ids) < 0.34
    assert splits != [split_of(i, seed=1) for i in ids]


# --- wiki-vital QA build -------------------------------------------------------------------------------

def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The full build, once, through the command line."""
    folder = tmp_path_factory.mktemp("wvqa")
    result = winnow("bench-data", "build", "--out", str(folder / "full"), env_dir=folder / "cache")
    return folder / "full", result


@pytest.mark.slow  # a whole build or export: seconds of CPU
def test_full_build_counts_and_summary(built):
    out, result = built
    manifest = json.loads((out / "manifest.json").read_text())
    kept = {source: counts["kept"] for source, counts in manifest["counts"].items()}
    assert kept == EXPECTED_WIKI_VITAL_QA
    assert manifest["counts"]["nq-test"]["considered"] == 3610
    assert manifest["counts"]["triviaqa-test"]["considered"] == 11313
    for counts in manifest["counts"].values():
        assert counts["considered"] == sum(counts["dropped"].values()) + counts["kept_total"]
    assert "nq-test" in result.stdout and "names no article" in result.stdout
    assert "dev and" in result.stderr and "no LLM calls" in result.stderr
    readme = (out / "README.md").read_text()
    assert "CC BY-SA 4.0" in readme and "CC BY-SA 3.0" in readme and "Apache-2.0" in readme
    assert f"Test: {manifest['questions']['test']:,} questions" in readme
    for name, record in manifest["files"].items():
        assert record["sha256"] == sha256(out / name)
    assert sorted(path.name for path in out.iterdir()) == sorted(
        ["README.md", "corpus.jsonl", "dev.jsonl", "test.jsonl", "qrels.dev.txt", "qrels.test.txt", "manifest.json"])
    assert not [path for path in out.parent.iterdir() if path.name.startswith(".")]


@pytest.mark.slow  # reads the whole build
def test_every_kept_question_obeys_the_rules(built, names):
    out, _ = built
    corpus = {passage.id: passage for passage in load_corpus(out / "corpus.jsonl").passages}
    assert len(corpus) == 10033
    seen = set()
    for split in ("dev", "test"):
        items = read_qa_jsonl(out / f"{split}.jsonl")
        qrels = read_qrels(out / f"qrels.{split}.txt")
        assert set(qrels) == {item.id for item in items}
        for item in items:
            relevant = item.metadata["articles"]
            assert qrels[item.id] == dict.fromkeys(relevant, 1)
            assert item.metadata["split"] == split == split_of(item.id)
            assert item.metadata["source"] in ("nq-test", "triviaqa-test")
            assert not has_answer(item.question, item.golden_answers)
            named = {match.article_id for match in names.named_in(item.question)}
            for article_id in relevant:
                assert article_id in named and has_answer(corpus[article_id].text, item.golden_answers)
        seen |= {item.id for item in items}
    assert len(seen) == sum(sum(split.values()) for split in EXPECTED_WIKI_VITAL_QA.values())


@pytest.mark.slow  # a whole build or export: seconds of CPU
def test_limited_build_is_deterministic_atomic_and_guarded(tmp_path):
    first = build_wiki_vital_qa(tmp_path / "a", limit=150)
    assert first.manifest["limit_per_source"] == 150
    assert {source: counts.considered for source, counts in first.selection.counts.items()} == {
        "nq-test": 150, "triviaqa-test": 150}
    assert "Partial build" in (tmp_path / "a" / "README.md").read_text()
    build_wiki_vital_qa(tmp_path / "b", limit=150)
    for name in ("dev.jsonl", "test.jsonl", "qrels.dev.txt", "qrels.test.txt", "corpus.jsonl"):
        assert sha256(tmp_path / "a" / name) == sha256(tmp_path / "b" / name)
    with pytest.raises(WinnowError, match="already exists"):
        build_wiki_vital_qa(tmp_path / "a", limit=150)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(WinnowError, match="is not a wiki-vital-qa build"):
        build_wiki_vital_qa(tmp_path / "mine", limit=10, overwrite=True)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    reseeded = build_wiki_vital_qa(tmp_path / "a", limit=150, seed=5, overwrite=True)
    assert reseeded.manifest["seed"] == 5
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a", "b", "mine"]  # no temporary folders left


# --- command line -----------------------------------------------------------------------------------

@pytest.mark.slow  # a whole build or export: seconds of CPU
def test_data_list_and_export(tmp_path):
    rows = json.loads(winnow("data", "list", "--json", env_dir=tmp_path).stdout)
    by_name = {row["name"]: row for row in rows}
    assert by_name["nq-test"]["questions"] == 3610 and by_name["nq-test"]["licence"] == "CC BY-SA 3.0"
    assert by_name["dl20-passage"]["judged"] == 54 and "non-commercial" in by_name["dl20-passage"]["licence"]
    table = winnow("data", "list", env_dir=tmp_path).stdout
    assert "triviaqa-test" in table and "beir/scifact" in table
    result = winnow("data", "export", "curatedtrec-test", "--out", str(tmp_path / "ct.jsonl"), env_dir=tmp_path)
    assert "wrote 694 questions" in result.stderr
    assert read_qa_jsonl(tmp_path / "ct.jsonl")[0].is_regex
    winnow("data", "export", "dl19-passage", "--out", str(tmp_path / "dl19.jsonl"), env_dir=tmp_path)
    assert len(read_qa_jsonl(tmp_path / "dl19.jsonl")) == 43
    assert read_qrels(tmp_path / "qrels.dl19.txt") == load_dataset("dl19-passage").qrels
    folder = write_beir_folder(tmp_path / "tiny")
    winnow("data", "export", str(folder), "--split", "dev", "--out", str(tmp_path / "tiny-dev.jsonl"),
           env_dir=tmp_path)
    assert read_qrels(tmp_path / "qrels.tiny-dev.txt") == {"q2": {"d2": 1}}


def test_cli_errors_are_one_line(tmp_path):
    (tmp_path / "notes.txt").write_text("not a build")
    result = winnow("data", "export", "nq-tst", "--out", str(tmp_path / "x.jsonl"), env_dir=tmp_path, check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "did you mean nq-test" in result.stderr and not (tmp_path / "x.jsonl").exists()
    result = winnow("bench-data", "build", "--out", str(tmp_path), "--limit", "5", "--overwrite", env_dir=tmp_path,
                    check=False)
    assert result.returncode == 2 and "is not a wiki-vital-qa build" in result.stderr


def test_export_judged_only_keeps_the_judged_queries_and_says_what_it_left_out(tmp_path):
    from typer.testing import CliRunner

    from winnow.cli import app

    everything = CliRunner().invoke(app, ["data", "export", "dl20-passage", "-o", str(tmp_path / "all.jsonl")])
    assert everything.exit_code == 0, everything.output
    assert "146 of the 200 questions have no relevance judgments" in " ".join(everything.output.split())
    judged = CliRunner().invoke(app, ["data", "export", "dl20-passage", "--judged-only", "-o",
                                      str(tmp_path / "judged.jsonl")])
    assert judged.exit_code == 0, judged.output
    assert len((tmp_path / "judged.jsonl").read_text().splitlines()) == 54
    assert "(146 without judgments left out)" in " ".join(judged.output.split())


def test_run_files_carry_the_scores_given_ties_a_float_apart_and_rank_scores_otherwise(tmp_path):
    import math

    from winnow.datasets.trec import scores_in_order

    tied = scores_in_order([7.25, 3.5, 3.5, 3.5, -1.0], 5)
    assert tied[:2] == [7.25, 3.5] and tied[4] == -1.0
    assert tied[2] == math.nextafter(3.5, -math.inf) and tied[3] == math.nextafter(tied[2], -math.inf)
    write_run({"q": list(zip("edcba", tied, strict=True))}, tmp_path / "run.txt")
    back = read_run(tmp_path / "run.txt")
    assert back == {"q": list(zip("edcba", tied, strict=True))}  # written exactly, the order kept
    rr = ir_measures.RR @ 10
    assert ir_measures.calc_aggregate([rr], {"q": {"c": 1}}, run_scores(back))[rr] == pytest.approx(1 / 3)
    # An order its scores do not give (they rise), a score that is not finite, no scores: ranks.
    for scores in ([1.0, 2.0, 0.5], [3.0, float("-inf"), 1.0], None):
        assert scores_in_order(scores, 3) == [3.0, 2.0, 1.0]
