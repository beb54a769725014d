"""GAR-meets-RAG (Arora et al., 2023) as a reproducer needs it: the ablations of §5.2-5.3, the two-pass
re-ranker of §4(C) and App. B, Table 4's rewrite limit, and the non-paper fallback re-rankers.

Control flow (which documents feed the rewriter, which query σ is asked about, what reaches h) is
pinned with the scripted model of test_rrr.py, since the real small model grades almost everything
alike; the re-rankers, the second pass on its own model and the call counts run on the real SmolLM2.
"""

import pytest
from test_rrr import ScriptedModel, rounds

from winnow.errors import WinnowError
from winnow.evaluation.labels import run_label
from winnow.evaluation.report import LoadedRun, deviation_notes
from winnow.llm import LLM, CallCache
from winnow.methods import build_method, method_settings
from winnow.pipeline import RunSpec
from winnow.prompts import rewrite_prompt
from winnow.settings import SettingError
from winnow.stages import sliding_windows

#: RRR App. A.1's instruction, as printed.
A1_INSTRUCTION = (
    "I am using a search engine to find relevant documents related to the given TOPIC. The search engine doesn't "
    "work very well.\nI will give you the top search results for various QUERIES that I tried.\nYou should suggest "
    "me other topics that I should search in order to find more interesting documents relevant to the TOPIC.\n"
    "Since the search engine mostly does lexical matching, it could be weak in retrieving documents containing some "
    "words. Use those words to improve the overall search quality. Also, use your own knowledge and understanding "
    "of the TOPIC to generate rewrites related to topics which might not be present in the retrieved documents. "
    "Enclose the answer in <<Rewrite>><</Rewrite>>. Do not give any explanation.")


def run(index, grades, script, llm_kwargs=None, **settings):
    model = ScriptedModel(grades, script)
    method = build_method("rrr", index=index, llm=LLM(model), **{"n": 3, "k": 2, **settings}, **(llm_kwargs or {}))
    return model, method.ask("capital of france")


def stages(answer, name):
    return [s for s in answer.trace.stages if s.name == name]


# --- ablations: §5.2 (a) Table 5, §5.3 (i)-(iii) Tables 7-9 -------------------------------------------

def test_without_retrieval_feedback_the_rewriter_sees_only_the_queries_tried(index):
    """§5.2 (a), Table 5: "omitting the addition of retrieved results to the re-writer prompt π_t (in
    Step 12 of Algorithm 1)" - the prompt lists TOPIC and the queries, and no TOP RESULTS."""
    model, _ = run(index, {}, ["rome italy", "nile river", "x"], n=8, rewrites=3, feedback="none")
    assert model.rewrite_prompts == [
        f"{A1_INSTRUCTION}\nTOPIC: capital of france\nQUERY #1: capital of france",
        f"{A1_INSTRUCTION}\nTOPIC: capital of france\nQUERY #1: capital of france\nQUERY #2: rome italy",
    ]
    assert rewrite_prompt("rrr.rewrite").instruction == A1_INSTRUCTION


def test_sigma_feedback_shows_the_rewriter_the_best_graded_documents(index):
    """§5.3 (iii), Table 9: feedback documents chosen "based on relevance (σ) scores" instead of the top
    N_aug by retriever (BM25) score (Step 11)."""
    grades = {"Rome": 5, "Berlin": 4}
    _, by_bm25 = run(index, grades, ["x"], n=8, rewrites=2, feedback_docs=2)
    model, answer = run(index, grades, ["x"], n=8, rewrites=2, feedback_docs=2, feedback="relevance")
    retrieved = [c["id"] for c in stages(answer, "retrieve")[0].output]
    assert {"rome", "berlin"} <= set(retrieved) and retrieved[:2] != ["rome", "berlin"]
    [prompt] = model.rewrite_prompts
    assert prompt.endswith("TOP RESULTS:\n1. Rome Rome is the capital city of Italy.\n"
                           "2. Berlin Berlin is the capital and largest city of Germany.")
    [rewrite] = stages(answer, "rewrite")
    assert rewrite.settings["feedback"] == "relevance"
    [bm25_rewrite] = stages(by_bm25, "rewrite")
    assert bm25_rewrite.settings["feedback"] == "retriever"


def test_sigma_against_the_rewrite_asks_about_q_t(index):
    """§5.3 (ii), Table 8: relevance "in relation to … the rewrite q_t from which the document was
    retrieved". The rendered relevance prompts in the trace carry q_t; a document retrieved again by
    a later rewrite is asked again, about that rewrite."""
    model, answer = run(index, {"Rome": 3}, ["rome capital", "x"], n=8, rewrites=2, relevance_query="rewrite")
    first, second = stages(answer, "relevance")
    assert {call.messages[1]["content"].split("QUERY: ")[1].split(" DOCUMENT:")[0]
            for call in first.llm_calls} == {"capital of france"}
    assert {call.messages[1]["content"].split("QUERY: ")[1].split(" DOCUMENT:")[0]
            for call in second.llm_calls} == {"rome capital"}
    assert second.settings["against"] == "the query that retrieved it" and second.details.already_graded == 0
    again = {g["id"] for g in first.details.grades} & {g["id"] for g in second.details.grades}
    assert again  # "rome capital" retrieves some of round 1's documents: asked again
    # By default σ is always about q, and a document is graded once.
    default, _ = run(index, {"Rome": 3}, ["rome capital", "x"], n=8, rewrites=2)
    assert set(default.graded_queries) == {"capital of france"}
    assert len(model.graded_queries) == len(default.graded_queries) + len(again)


def test_without_the_final_reranker_s_ordered_by_sigma_is_the_answer_list(index):
    """§5.3 (i), Table 7: "Can we instead only rely on the relevance scores obtained using σ to re-rank S?"."""
    _, answer = run(index, {"Paris": 5, "France": 4, "Rome": 3}, ["x"], n=3, rerank="none")
    assert [s.name for s in answer.trace.stages][-2:] == ["order", "generate"]
    [order] = stages(answer, "order")
    assert [c.passage.id for c in answer.passages] == [c["id"] for c in order.output][:2] == ["paris", "france"]


class SoftGrader(ScriptedModel):
    """Grades by a table of next-token distributions over "1".."5" (title -> {grade: probability}), so
    that two documents can share σ (the argmax) and differ in E[σ]."""

    def choice_logprobs(self, prompts, choices):
        import math

        from winnow.llm.base import ChoiceScores

        out = []
        for messages in prompts:
            title = messages[1]["content"].split(" DOCUMENT: ")[1].split("\n")[0]
            dist = self.grades.get(title, {"1": 1.0})
            out.append(ChoiceScores({c: math.log(dist.get(c, 1e-9)) for c in choices}, 10, 0.0))
        return out


def test_sigma_ties_break_by_expected_grade_or_by_the_order_found(index):
    """Step 15 orders S by σ, an integer: France and Paris are both graded 4. Winnow's default puts
    the one with the higher E[σ] (Paris, 4.1 against 3.6) first; ``sigma_ties=found``, the paper's
    integer σ and ``--profile paper``'s, keeps the order found (BM25 retrieved France first). With
    rerank=none (Table 7) that order is the output."""
    grades = {"France": {"4": 0.6, "3": 0.4}, "Paris": {"4": 0.9, "5": 0.1}, "Rome": {"3": 1.0}}

    def order(**settings):
        method = build_method("rrr", index=index, llm=LLM(SoftGrader(grades, [])),
                              **{"n": 8, "k": 2, "rewrites": 1, "rerank": "none", **settings})
        answer = method.ask("capital of france")
        assert [c["id"] for c in stages(answer, "retrieve")[0].output][:2] == ["france", "paris"]
        [stage] = stages(answer, "order")
        return [c["id"] for c in stage.output], stage.settings["by"]

    assert order() == (["paris", "france", "rome"], "σ(q, ·) then E[σ], then order found")
    assert order(sigma_ties="found") == (["france", "paris", "rome"], "σ(q, ·) then order found")
    assert method_settings("rrr", profile="paper").sigma_ties == "found"
    assert method_settings("rrr").sigma_ties == "expected"


def test_s_capped_at_n_before_reranking(index):
    """§4(C) re-ranks "N documents in S (after Step 15 of Algorithm 1)" and App. B counts ((N - w) // s) + 1
    windows for it; Algorithm 1 itself re-ranks all of S, which the last round can push past N."""
    grades = {"Paris": 5, "France": 4, "Nile": 3, "Jupiter": 2}
    _, whole = run(index, grades, ["nile jupiter"], n=3, window=2, step=1)
    _, capped = run(index, grades, ["nile jupiter"], n=3, window=2, step=1, cap_pool_at_n=True)
    assert [r["total"] for r in rounds(whole)] == [2, 4]  # round 2 adds the Nile and Jupiter: |S| = 4 > N = 3
    [listwise] = stages(whole, "listwise")
    assert len(listwise.input) == 4 and listwise.details.windows_sent == 3
    [order] = stages(capped, "order")
    assert [c["id"] for c in order.output] == ["paris", "france", "nile"] and order.details.beyond_n == ["jupiter"]
    [listwise] = stages(capped, "listwise")
    assert len(listwise.input) == 3 and listwise.details.windows_sent == ((3 - 2) // 1) + 1


def test_rewriter_token_limit_is_table_4s_and_n_rw_5_makes_4_rewrites(index):
    """Table 4: "Rewriter g … token limit 20"; App. B: "N_rw = 5 rewrites, with the initial query counting
    as one, resulting in 4 calls"."""
    limits = []

    class Recording(ScriptedModel):
        def generate(self, prompts, *, max_tokens, temperature=0.0, stop=()):
            if any("<<Rewrite>>" in p[-1]["content"] for p in prompts):
                limits.append(max_tokens)
            return super().generate(prompts, max_tokens=max_tokens, temperature=temperature, stop=stop)

    model = Recording({}, ["a", "b", "c", "d"])
    answer = build_method("rrr", index=index, llm=LLM(model), n=8, k=2).ask("capital of france")
    assert len(model.rewrite_prompts) == 4 and len(rounds(answer)) == 5
    assert limits == [20] * 4


# --- the two-pass re-ranker: §4(C), App. B ----------------------------------------------------------

def test_app_b_window_counts():
    """App. B: "((N - w) // s) + 1 calls to GPT-3.5-Turbo and ((30 - w) // s) + 1 calls to GPT-4. Given
    w=10 and s=5, this results in 20 calls to GPT-3.5-Turbo and 5 calls to GPT-4." The formula gives 19
    for N = 100 (the printed 20 does not follow from it); the windows Winnow sends match the formula."""
    assert len(sliding_windows(100, 10, 5)) == ((100 - 10) // 5) + 1 == 19
    assert len(sliding_windows(30, 10, 5)) == ((30 - 10) // 5) + 1 == 5


@pytest.fixture
def rerank2(llama_backend, tmp_path):
    """A second client of the real model, standing for the stronger model, that logs the stages it serves."""
    served = []
    llm = LLM(llama_backend, CallCache(tmp_path / "rerank2.sqlite"), progress=lambda stage, *_: served.append(stage))
    llm.served = served
    return llm


@pytest.mark.llm
def test_rankgpt_second_pass_reranks_the_top_d_on_the_rerank2_model(index, llm, rerank2):
    answer = build_method("rankgpt", index=index, llm=llm, agents={"rerank2": rerank2}, n=4, k=2, window=2, step=1,
                          second_pass_depth=3).ask("capital city of france")
    assert [s.name for s in answer.trace.stages] == ["retrieve", "listwise", "second_pass", "generate"]
    first, second = answer.trace.stages[1:3]
    assert len(first.output) == 4
    # App. B's counts: ((N - w) // s) + 1 windows, then ((d - w) // s) + 1 on the second model.
    assert first.details.windows_sent == len(first.llm_calls) == ((4 - 2) // 1) + 1
    assert second.details.windows_sent == len(second.llm_calls) == ((3 - 2) // 1) + 1
    assert set(rerank2.served) == {"second_pass"}
    assert [c["id"] for c in second.input] == [c["id"] for c in first.output[:3]]
    assert second.settings["depth"] == 3 and second.settings["below_depth"] == 1
    assert len(second.output) == 4 and second.output[3]["id"] == first.output[3]["id"]
    assert second.output[3]["note"].startswith("below the second pass's depth 3")


@pytest.mark.llm
def test_rrr_second_pass_and_pointwise_fallback_on_the_real_model(index, llm, rerank2):
    answer = build_method("rrr", index=index, llm=llm, agents={"rerank2": rerank2}, n=4, k=2, rewrites=1, tau=0,
                          window=3, step=1, second_pass_depth=3).ask("capital city of france")
    names = [s.name for s in answer.trace.stages]
    assert names[-3:] == ["listwise", "second_pass", "generate"]
    second = answer.trace.stages[-2]
    assert second.kind == "listwise" and len(second.llm_calls) == 1 and set(rerank2.served) == {"second_pass"}

    fallback = build_method("rrr", index=index, llm=llm, n=4, k=2, rewrites=1, tau=0,
                            rerank="pointwise").ask("capital city of france")
    [rerank] = stages(fallback, "rerank")
    assert rerank.kind == "pointwise-true" and len(rerank.llm_calls) == len(rerank.input) == 4
    assert not stages(fallback, "listwise")


@pytest.mark.llm
def test_rankgpt_graded_fallback_on_the_real_model(index, llm):
    answer = build_method("rankgpt", index=index, llm=llm, n=4, k=2, rerank="graded").ask("capital city")
    assert [s.name for s in answer.trace.stages] == ["retrieve", "graded", "generate"]
    graded = answer.trace.stages[1]
    assert len(graded.details.grades) == len(graded.input) and graded.details.already_graded == 0


def test_rrr_graded_h_reuses_sigma_only_on_the_same_model(index):
    model, answer = run(index, {"Paris": 5, "France": 4, "Rome": 3}, ["x"], n=3, rerank="graded")
    [graded] = stages(answer, "graded")
    assert graded.details.already_graded == 3 and not graded.llm_calls  # σ(q, ·) again: already known
    other = ScriptedModel({"Rome": 5}, [])
    _, answer = run(index, {"Paris": 5, "France": 4, "Rome": 3}, ["x"], n=3, rerank="graded",
                    llm_kwargs={"agents": {"rerank": LLM(other)}})
    [graded] = stages(answer, "graded")
    assert graded.details.already_graded == 0 and len(other.graded_queries) == 3
    assert [c.passage.id for c in answer.passages] == ["rome", "paris"]


# --- settings, roles, labels -------------------------------------------------------------------------

@pytest.mark.parametrize("method, settings, message", [
    ("rrr", {"second_pass_depth": 1}, r"must be 0 \(no second pass\) or at least 2"),
    ("rrr", {"second_pass_depth": 30, "rerank": "none"}, "needs a final re-ranker"),
    ("rankgpt", {"rerank": "none"}, "setting 'rerank' must be one of 'listwise', 'pointwise', 'graded'"),
    ("rankgpt", {"second_pass_depth": 30, "fusion_alpha": 0.5}, "cannot be combined"),
    ("rrr", {"feedback": "bm25"}, "setting 'feedback' must be one of 'retriever', 'relevance', 'none'"),
    ("rrr", {"relevance_query": "q_t"}, "setting 'relevance_query' must be one of 'original', 'rewrite'"),
])
def test_bad_values_are_refused_naming_the_setting(method, settings, message):
    with pytest.raises(SettingError, match=message):
        RunSpec.resolve(run={"method": method}, settings=settings)


def test_the_second_pass_model_is_an_agent_role(tmp_path):
    config = tmp_path / "rrr.toml"
    config.write_text('method = "rrr"\nsecond_pass_depth = 30\n[agents]\nrerank2 = "qwen2.5-coder-1.5b"\n')
    spec = RunSpec.resolve(config=config)
    assert spec.agents == {"rerank2": "qwen2.5-coder-1.5b"} and spec.settings["second_pass_depth"] == 30
    assert RunSpec.resolve(run={"method": "rankgpt", "agents": {"rerank2": "x"}}).agents == {"rerank2": "x"}
    with pytest.raises(WinnowError, match="has no agent role"):
        RunSpec.resolve(run={"method": "rankrag", "agents": {"rerank2": "x"}})


def test_http_options_reach_the_new_settings():
    """/v1/ask's ``options`` go through the same typed settings (no server needed to check them)."""
    from winnow.service.limits import ApiError, Limits, check_settings

    chosen = check_settings("rrr", {}, {"options.second_pass_depth": 30, "options.feedback": "none",
                                        "options.rerank": "pointwise"}, Limits())
    assert (chosen["second_pass_depth"], chosen["feedback"], chosen["rerank"]) == (30, "none", "pointwise")
    with pytest.raises(ApiError) as refused:
        check_settings("rankgpt", {}, {"options.second_pass_depth": 1}, Limits())
    assert refused.value.field == "options.second_pass_depth"


def test_fallback_rerankers_are_labelled_as_deviations(tmp_path):
    spec = RunSpec.resolve(run={"method": "rrr", "model": "smollm2-135m"}, settings={"rerank": "pointwise", "n": 8})
    assert run_label(spec) == "rrr smollm2-135m N=8 k=5 rerank=pointwise (not the paper's)"
    ablation = RunSpec.resolve(run={"method": "rrr", "model": "smollm2-135m"}, settings={"rerank": "none"})
    assert run_label(ablation) == "rrr smollm2-135m N=20 k=5 rerank=none"  # Table 7: the paper's own ablation
    from run_records import metrics

    run_of = lambda label, deviations: LoadedRun(tmp_path, {}, metrics(label=label, deviations=deviations), [])  # noqa: E731
    notes = deviation_notes([run_of("a", {"rerank": "why"}), run_of("b", {}), run_of("c (older run)", None)])
    assert notes == ["a: rerank (why)"]
