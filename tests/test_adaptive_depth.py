"""Adaptive depth: a real BM25 index (tests/small_corpus.py) and the real SmolLM2-135M model.

A question whose first stage is sure (the top score's share of the list, scaled, at least the
threshold) skips the LLM stage or sees only its top few; one that is not sure gets the whole
method. The margins of the questions used here are asserted first, so a change to the index or the
rule fails here rather than passing for the wrong reason.
"""

import pytest

from winnow.details import AdaptiveDepthDetails
from winnow.evaluation.runner import run_label
from winnow.methods import build_method, method_settings
from winnow.run_spec import RunSpec
from winnow.settings import SettingError
from winnow.stages.adaptive_depth import first_stage_margin

SURE = "capital of italy"  # rome 1.38, then 0.37, 0.36, 0.35: margin 0.41 at N=4
UNSURE = "capital city"  # rome 0.91, berlin 0.88, paris 0.86, france 0.35: margin 0.07 at N=4
THRESHOLD = 0.3


def margin_of(index, question, n=4):
    return first_stage_margin([c.score for c in index.search(question, k=n)])


def test_the_margin_is_the_top_scores_share_scaled_to_0_1():
    assert first_stage_margin([2.0, 2.0, 2.0]) == 0.0  # an even list says nothing
    assert first_stage_margin([3.0, 0.0, 0.0]) == 1.0  # all the mass on the top
    assert first_stage_margin([2.0, 1.0, 1.0]) == pytest.approx((0.5 - 1 / 3) / (1 - 1 / 3))
    assert first_stage_margin([1.0]) == 1.0 and first_stage_margin([]) == 0.0
    # Negative scores (a dense inner product) are shifted so the lowest is 0.
    assert first_stage_margin([0.5, -0.5, -0.5]) == first_stage_margin([1.0, 0.0, 0.0]) == 1.0
    assert first_stage_margin([1.0, 2.0, 1.0]) == first_stage_margin([2.0, 1.0, 1.0])  # the top, wherever it is


def test_the_questions_here_are_sure_and_unsure(index):
    assert margin_of(index, SURE) >= THRESHOLD > margin_of(index, UNSURE)


def test_settings_are_typed_bounded_and_marked_as_not_the_papers():
    settings = method_settings("rankrag", adaptive_depth=0.3, adaptive_depth_keep=2, n=4, k=2)
    assert "adaptive_depth" in settings.deviations() and "top 2" in settings.deviations()["adaptive_depth"]
    assert method_settings("rankrag").deviations() == {}  # off by default: the paper's method
    for bad, setting in [({"adaptive_depth": 1.5}, "adaptive_depth"), ({"adaptive_depth": -0.1}, "adaptive_depth"),
                         ({"adaptive_depth_keep": 2}, "adaptive_depth_keep"),
                         ({"adaptive_depth": 0.3, "adaptive_depth_keep": 20}, "adaptive_depth_keep"),
                         ({"adaptive_depth": 0.3, "adaptive_depth_keep": -1}, "adaptive_depth_keep")]:
        for method in ("rankrag", "mainrag", "rrr", "rankgpt"):
            with pytest.raises(SettingError) as caught:
                method_settings(method, **bad)
            assert caught.value.setting == setting, (method, bad)
    spec = RunSpec.resolve(run={"method": "rankrag", "model": "smollm2-135m"}, settings={"adaptive_depth": 0.05})
    assert run_label(spec) == "rankrag smollm2-135m N=20 k=5 adaptive_depth=0.05 (not the paper's)"


def depth_record(answer):
    [stage] = [s for s in answer.trace.stages if s.kind == "adaptive-depth"]
    assert isinstance(stage.details, AdaptiveDepthDetails)
    return stage.details


@pytest.mark.llm
def test_rankrag_skips_the_reranker_for_a_sure_question_only(index, llm):
    full = build_method("rankrag", index=index, llm=llm, n=4, k=2).ask_batch([SURE, UNSURE])
    rag = build_method("rankrag", index=index, llm=llm, n=4, k=2, adaptive_depth=THRESHOLD)
    sure, unsure = rag.ask_batch([SURE, UNSURE])
    # The sure question: no P("True") call, the reader on BM25's top 2.
    assert [s.name for s in sure.trace.stages] == ["retrieve", "adaptive_depth", "generate"]
    assert sure.usage.calls + sure.usage.cache_hits == 1
    assert [c.passage.id for c in sure.passages] == [c.passage.id for c in index.search(SURE, k=2)]
    assert all("set aside by adaptive depth" in c.note for c in sure.passages)
    record = depth_record(sure)
    assert (record.sure, record.skipped, record.depth, record.set_aside) == (True, True, 0, 4)
    assert record.margin == pytest.approx(margin_of(index, SURE), abs=1e-6) and record.threshold == THRESHOLD
    assert "share" in record.rule
    # The unsure question: the whole method, the same answer and calls as without adaptive depth.
    assert [s.name for s in unsure.trace.stages] == ["retrieve", "adaptive_depth", "rerank", "generate"]
    assert (depth_record(unsure).sure, depth_record(unsure).set_aside) == (False, 0)
    assert unsure.text == full[1].text and [c.passage.id for c in unsure.passages] == [
        c.passage.id for c in full[1].passages]
    calls = lambda answers: sum(a.usage.calls + a.usage.cache_hits for a in answers)  # noqa: E731
    assert calls(full) == 2 * (4 + 1) and calls([sure, unsure]) == 1 + 4 + 1
    # Alone or in a batch, the same.
    alone = rag.ask(SURE)
    assert alone.text == sure.text and [s.name for s in alone.trace.stages] == [s.name for s in sure.trace.stages]


@pytest.mark.llm
def test_a_shortened_depth_reranks_the_head_and_keeps_the_tail_below(index, llm):
    rag = build_method("rankrag", index=index, llm=llm, n=4, k=3, adaptive_depth=THRESHOLD, adaptive_depth_keep=2)
    answer = rag.ask(SURE)
    rerank = next(s for s in answer.trace.stages if s.name == "rerank")
    assert len(rerank.llm_calls) == 2 and len(rerank.input) == 2
    bm25 = [c.passage.id for c in index.search(SURE, k=4)]
    ids = [c.passage.id for c in answer.passages]
    assert len(ids) == 3 and set(ids[:2]) == set(bm25[:2]) and ids[2] == bm25[2]
    assert answer.passages.candidates[2].note.startswith("set aside") and not answer.passages.candidates[0].note
    record = depth_record(answer)
    assert (record.skipped, record.depth, record.set_aside) == (False, 2, 2)


@pytest.mark.llm
def test_mainrag_rrr_and_rankgpt_skip_their_llm_stages_for_a_sure_question(index, llm):
    for method, llm_stages in [("mainrag", {"predict", "judge"}), ("rrr", {"relevance", "rewrite", "listwise"}),
                               ("rankgpt", {"listwise"})]:
        extra = {"rewrites": 2} if method == "rrr" else {}
        runner = build_method(method, index=index, llm=llm, n=4, k=2, adaptive_depth=THRESHOLD, **extra)
        sure, unsure = runner.ask_batch([SURE, UNSURE])
        assert not llm_stages & {s.name for s in sure.trace.stages}, method
        assert depth_record(sure).skipped and not depth_record(unsure).sure
        assert sure.usage.calls + sure.usage.cache_hits == 1, method  # the reader alone
        assert llm_stages & {s.name for s in unsure.trace.stages}, method
        # The sure question reads the first stage's order (MAIN-RAG, with no k, all of its N).
        read = 4 if method == "mainrag" else 2
        assert [c.passage.id for c in sure.passages] == [c.passage.id for c in index.search(SURE, k=read)], method
