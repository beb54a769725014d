"""The adapters' configurations: saved and loaded by each framework's own serialisation, every
argument kept, typos refused by name, the frameworks' own argument names accepted. Nothing here loads
a model: the adapters are built lazily (``lazy=True``, Haystack's ``warm_up``), and a model "handed in"
is an OpenAI-compatible client, which contacts no server until it is called.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from winnow.integrations.core import MethodRunner, describe_llm
from winnow.llm import load_llm

SERVER = "http://127.0.0.1:9/v1"  # nothing listens there: a call would fail, and none is made
SECRET = "sk-never-written-anywhere"
TRUSTED = "winnow.integrations.haystack"  # Haystack loads classes only from modules its user trusts


@pytest.fixture
def remote_llm():
    llm = load_llm("smollm2-remote", backend="openai", base_url=SERVER, api_key=SECRET, cache=False)
    yield llm
    llm.close()


def test_an_llm_is_described_by_name_backend_and_address_never_its_key(remote_llm):
    assert describe_llm(remote_llm) == {"model": "smollm2-remote", "backend": "openai", "base_url": SERVER}


# --- Haystack --------------------------------------------------------------------------------------

def test_haystack_pipeline_dumps_and_loads_the_ranker_unchanged():
    from haystack import Pipeline

    from winnow.integrations.haystack import WinnowRanker

    ranker = WinnowRanker(stage="graded_filter", model="smollm2-135m", backend="openai", base_url=SERVER, tau=2.0,
                          top_k=3, api_key=SECRET)
    pipe = Pipeline()
    pipe.add_component("ranker", ranker)
    saved = pipe.dumps()
    assert SECRET not in saved
    loaded = Pipeline.loads(saved, allowed_modules=[TRUSTED]).get_component("ranker")
    assert isinstance(loaded, WinnowRanker)
    init = loaded.to_dict()["init_parameters"]
    assert {key: init[key] for key in ("stage", "model", "backend", "base_url", "tau", "top_k")} == {
        "stage": "graded_filter", "model": "smollm2-135m", "backend": "openai", "base_url": SERVER, "tau": 2.0,
        "top_k": 3}
    assert loaded.to_dict() == ranker.to_dict()
    assert loaded.winnower.llm is None  # nothing loaded: warm_up() would


def test_haystack_ranker_with_an_llm_saves_the_llm_by_name(remote_llm):
    from haystack.core.serialization import component_from_dict, component_to_dict

    from winnow.integrations.haystack import WinnowRanker

    ranker = WinnowRanker(stage="judge_filter", llm=remote_llm, judge_n=0.5, max_document_answer_tokens=12)
    data = component_to_dict(ranker, "ranker")
    init = data["init_parameters"]
    assert (init["model"], init["backend"], init["base_url"]) == ("smollm2-remote", "openai", SERVER)
    assert init["judge_n"] == 0.5 and init["max_document_answer_tokens"] == 12
    assert "api_key" not in init
    again = component_from_dict(WinnowRanker, data, "ranker")
    assert component_to_dict(again, "ranker") == data


def test_haystack_retriever_saves_the_index_the_method_and_the_settings(index):
    from haystack import Pipeline

    from winnow.integrations.haystack import WinnowRetriever

    retriever = WinnowRetriever("rankrag", index=index.path, model="smollm2-135m", k=3, settings={"n": 6},
                                profile="paper")
    pipe = Pipeline()
    pipe.add_component("retriever", retriever)
    loaded = Pipeline.loads(pipe.dumps(), allowed_modules=[TRUSTED]).get_component("retriever")
    assert loaded.to_dict() == retriever.to_dict()
    init = loaded.to_dict()["init_parameters"]
    assert init["method"] == "rankrag" and init["index"] == str(index.path) and init["model"] == "smollm2-135m"
    assert init["settings"]["k"] == 3 and init["settings"]["n"] == 6 and init["profile"] == "paper"
    assert loaded.runner.method is None  # lazy: the index and the model open in warm_up()


def test_haystack_retriever_refuses_a_typo_by_name(index):
    from winnow.integrations.haystack import WinnowRetriever

    with pytest.raises(ValueError, match=r"typo_argument: WinnowRetriever has no option.*'typo_argument'") as error:
        WinnowRetriever("rankrag", index=index.path, typo_argument=5)
    assert "index, pipeline, llm" in str(error.value) and "profile" in str(error.value)  # what it does take


# --- LlamaIndex ------------------------------------------------------------------------------------

def test_llamaindex_postprocessor_round_trips_with_its_llm(remote_llm):
    from winnow.integrations.llamaindex import WinnowPostprocessor

    built = WinnowPostprocessor(stage="graded_filter", llm=remote_llm, tau=2.0, top_n=3)
    data = built.to_dict()
    assert data["class_name"] == "WinnowPostprocessor"
    assert (data["model"], data["backend"], data["base_url"]) == ("smollm2-remote", "openai", SERVER)
    assert data["tau"] == 2.0 and data["top_n"] == 3 and SECRET not in str(data)
    again = WinnowPostprocessor.from_dict({**data, "lazy": True})  # lazy: the test loads no model
    assert {**again.to_dict(), "lazy": False} == data
    assert again.keep == 3


def test_llamaindex_postprocessor_refuses_a_typo_and_disagreeing_top_n():
    from winnow.integrations.llamaindex import WinnowPostprocessor

    with pytest.raises(ValidationError, match=r"top_m: WinnowPostprocessor has no argument 'top_m'.*top_n"):
        WinnowPostprocessor(stage="pointwise", model="smollm2-135m", lazy=True, top_m=3)
    with pytest.raises(ValidationError, match="top_n=2 and top_k=3 disagree"):
        WinnowPostprocessor(stage="pointwise", model="smollm2-135m", lazy=True, top_n=2, top_k=3)


# --- LangChain -------------------------------------------------------------------------------------

def test_langchain_compressor_dumps_its_whole_configuration(remote_llm):
    """LangChain's compressors (its rerankers included) are plain pydantic models: model_dump() is the
    configuration they are saved and built from."""
    from winnow.integrations.langchain import WinnowCompressor

    built = WinnowCompressor(stage="pointwise", llm=remote_llm, top_n=1)
    data = built.model_dump()
    assert (data["model"], data["backend"], data["base_url"], data["top_n"]) == ("smollm2-remote", "openai",
                                                                                 SERVER, 1)
    assert WinnowCompressor(**{**data, "lazy": True}).model_dump() == {**data, "lazy": True}
    with pytest.raises(ValidationError, match="typo_argument: WinnowCompressor has no argument"):
        WinnowCompressor(stage="pointwise", llm=remote_llm, typo_argument=5)


def test_langchain_retriever_refuses_a_typo_naming_it(index, remote_llm):
    from winnow.integrations.langchain import WinnowRetriever

    with pytest.raises(ValidationError, match=r"typo_argument: WinnowRetriever has no option"):
        WinnowRetriever(k=3, typo_argument=5, index=index, llm=remote_llm)
    retriever = WinnowRetriever(method="vanilla", k=3, index=index, llm=remote_llm)
    assert retriever._runner.spec.settings["k"] == 3


# --- the runner ------------------------------------------------------------------------------------

def test_method_runner_resolves_options_once_and_names_a_bad_one(index, remote_llm):
    runner = MethodRunner("rrr", index=index, llm=remote_llm, k=2, settings={"tau": 2.0}, profile="paper", lazy=True)
    assert runner.spec.settings["k"] == 2 and runner.spec.settings["tau"] == 2.0
    assert runner.config()["settings"]["k"] == 2 and runner.config()["model"] == "smollm2-remote"
    with pytest.raises(ValueError, match=r"k: given as k=2 and settings\['k'\]=3"):
        MethodRunner("rankrag", index=index, llm=remote_llm, k=2, settings={"k": 3})
    with pytest.raises(ValueError, match=r"settings\['windo'\]"):
        MethodRunner("rankrag", index=index, llm=remote_llm, settings={"windo": 3})
    with pytest.raises(ValueError, match="profile"):
        MethodRunner("rankrag", index=index, llm=remote_llm, profile="no-such-profile")


def test_method_runner_takes_ann_and_saves_it(index, remote_llm):
    runner = MethodRunner("vanilla", index=index.path, llm=remote_llm, retriever="dense", ann="hnsw",
                          ann_set=["efSearch=64"], lazy=True)
    assert (runner.spec.ann, runner.spec.ann_set) == ("hnsw", {"efSearch": 64})
    saved = runner.config()
    assert (saved["ann"], saved["ann_set"]) == ("hnsw", ["efSearch=64"])
    loaded = MethodRunner(index=index.path, lazy=True, **{key: value for key, value in saved.items()
                                                          if key != "index"}).spec
    assert (loaded.retriever, loaded.ann, loaded.ann_set) == ("dense", "hnsw", {"efSearch": 64})
    with pytest.raises(ValueError, match="ann: --ann hnsw searches embeddings, but the retriever is 'bm25'"):
        MethodRunner("vanilla", index=index.path, llm=remote_llm, ann="hnsw", lazy=True)


# --- the frameworks' own chat models ---------------------------------------------------------------

def test_a_frameworks_openai_compatible_chat_model_is_taken_on_its_server():
    from haystack.components.generators.chat import OpenAIChatGenerator
    from haystack.utils import Secret

    from winnow.integrations.haystack import WinnowRanker

    generator = OpenAIChatGenerator(model="smollm2-remote", api_base_url=SERVER, api_key=Secret.from_token(SECRET))
    ranker = WinnowRanker(stage="pointwise", llm=generator)
    assert describe_llm(ranker.winnower.llm) == {"model": "smollm2-remote", "backend": "openai", "base_url": SERVER}
    saved = ranker.to_dict()["init_parameters"]
    assert (saved["model"], saved["backend"], saved["base_url"]) == ("smollm2-remote", "openai", SERVER)
    assert SECRET not in str(saved)
    ranker.close()


def test_a_chat_model_without_log_probabilities_is_refused_in_one_line():
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    from winnow.integrations.langchain import WinnowCompressor

    with pytest.raises(ValidationError, match="llm: a FakeListChatModel cannot give Winnow the next-token "
                                              "log-probabilities") as error:
        WinnowCompressor(stage="pointwise", llm=FakeListChatModel(responses=["x"]))
    assert "OpenAI-compatible chat model" in str(error.value)


@pytest.mark.filterwarnings("ignore:The function `load` is in beta")
def test_langchain_serialisation_round_trips_the_retriever(index):
    from langchain_core.load import dumpd, load

    from winnow.integrations.langchain import WinnowRetriever

    retriever = WinnowRetriever(method="rankrag", index=index.path, model="smollm2-135m", k=3, lazy=True)
    loaded = load(dumpd(retriever), allowed_objects=[WinnowRetriever], valid_namespaces=["winnow"])
    assert isinstance(loaded, WinnowRetriever) and loaded.saved_arguments() == retriever.saved_arguments()
    assert loaded.saved_arguments()["settings"] == {"k": 3} and loaded.saved_arguments()["index"] == str(index.path)
    assert loaded._runner.method is None  # lazy: nothing opened


def test_method_runner_keeps_the_backends_options_and_saves_them(index):
    """timeout, hedge and tokenizer were taken and silently dropped (the runner's own copy of the run
    resolution had drifted): they reach the spec through the one resolver, are saved, and load back.
    tests/test_run_options.py walks every run option through every front door."""
    runner = MethodRunner("vanilla", index=index.path, backend="openai", base_url=SERVER, timeout=7.5, hedge=0.5,
                          tokenizer="smollm2-135m", max_inflight=3, lazy=True)
    spec = runner.spec
    assert (spec.timeout, spec.hedge, spec.tokenizer, spec.max_inflight) == (7.5, 0.5, "smollm2-135m", 3)
    saved = runner.config()
    assert (saved["timeout"], saved["hedge"], saved["tokenizer"]) == (7.5, 0.5, "smollm2-135m")
    loaded = MethodRunner(index=index.path, lazy=True, **{key: value for key, value in saved.items() if key != "index"})
    assert loaded.spec == spec
    with pytest.raises(ValueError, match=r"hedge: setting 'hedge' must be more than 0 seconds \(got -1.0\)"):
        MethodRunner("vanilla", index=index.path, backend="openai", base_url=SERVER, hedge=-1, lazy=True)
