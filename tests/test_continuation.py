"""RRR against servers that do and do not continue a started answer (issue 29, item 2).

A real HTTP server on loopback plays three kinds of endpoint: vLLM (continues a prefilled turn when
asked with ``continue_final_message``), a strict hosted API (answers 400 to that unknown field) and a
lenient one (accepts the field but opens a new turn). Each answers as a model would: the probe's
count goes on from 5 only when the turn is continued, and a grade prompt's first token is the digit
only when the answer was started with ``<<Score>>`` or the prompt asks for the digit first.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from winnow.llm import LLM
from winnow.llm.base import ChoiceScores
from winnow.llm.openai_http import OpenAICompatibleBackend
from winnow.records import Candidate, CandidateList, Passage, Query, StageScore, Trace
from winnow.stages import GradedRelevanceReranker
from winnow.stages.contract import QuestionState
from winnow.stages.graded import grade_from_choices, parse_leading_grade, parse_score
from winnow.stages.rewrite import QueryRewriter

# --- parsing: the paper's format, and nothing read from the wrong place ----------------------------


@pytest.mark.parametrize("text, grade", [
    ("<<Score>>-3", None),            # a minus sign is not dropped: -3 is no grade
    ("<<Score>>-3<</Score>>", None),
    ("-2<</Score>>", None),
    ("The score is -4.", None),
    ("<<Score>>\u22122", None),       # the Unicode minus too
    ("<<Score>>+4<</Score>>", 4),
    ("<<Score>>4<</Score>>", 4),      # A.2's own example
    ("on a scale of 1-5: 3", None),   # "1-5" is a range, not 1 and -5; three numbers: no guess
])
def test_parse_score_keeps_the_sign(text, grade):
    assert parse_score(text) == grade


@pytest.mark.parametrize("text, grade", [
    ("4", 4), (" 3\n", 3), ("2. The document is about…", 2),
    ("<<Score>>4<</Score>>", None), ("Score: 4", None), ("45", None), ("4.5", None), ("4/5", None), ("", None),
])
def test_first_token_answers_are_read_at_the_first_position_only(text, grade):
    assert parse_leading_grade(text) == grade


def _scores(top: dict[str, float]) -> ChoiceScores:
    from winnow.llm.choices import scores_over_choices

    logprobs, missing = scores_over_choices(list(top.items()), ("1", "2", "3", "4", "5"))
    return ChoiceScores(logprobs, 10, 0.0, missing, raw_top=dict(top))


def test_grade_from_choices_reads_no_digit_from_the_wrong_position():
    # A server that did not continue "<<Score>>": the next token is "<<"; the digits far down the list
    # belong to no position the model would write a grade at.
    assert grade_from_choices("d", _scores({"<<": -0.05, "3": -3.5, "1": -6.0})) is None
    assert grade_from_choices("d", _scores({"Score": -0.1, "4": -2.4})) is None
    grade = grade_from_choices("d", _scores({" 4": -0.1, "3": -2.4, "<<": -5.0}))
    assert grade is not None and grade.argmax == 4 and grade.source == "logprobs"


# --- a loopback server of each kind ---------------------------------------------------------------

class FakeServer(ThreadingHTTPServer):
    kind: str
    bodies: list[dict]


def _answer(server: FakeServer, body: dict) -> tuple[int, dict]:
    if server.kind == "strict" and "continue_final_message" in body:
        return 400, {"error": {"message": "Unrecognized request argument supplied: continue_final_message",
                               "type": "invalid_request_error"}}
    messages = body["messages"]
    started = messages[-1]["role"] == "assistant"
    continued = started and server.kind == "vllm" and body.get("continue_final_message") is True
    asked = messages[-2 if started else -1]["content"]
    if "Count from 1 to 10" in asked:
        first, text = ("5", "5, 6") if continued else ("1", "1, 2, 3")
    elif "DOCUMENT" in asked and "CHATTY" in asked:
        first, text = "Score", "Score: 4"
    elif "DOCUMENT" in asked and (continued or "Answer with the score alone" in asked):
        first, text = "4", "4"
    elif "DOCUMENT" in asked:
        first, text = "<<", "<<Score>>4<</Score>>"
    else:  # the rewriter: a full tagged answer, or its rest after a continued "<<Rewrite>>"
        first, text = ("hamlet", "hamlet author") if continued else ("<<", "<<Rewrite>>hamlet author<</Rewrite>>")
    if body.get("logprobs"):
        top = [{"token": first, "logprob": -0.05}, {"token": "3", "logprob": -3.5}, {"token": "1", "logprob": -6.0}]
        return 200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": first},
                                  "logprobs": {"content": [{"token": first, "logprob": -0.05, "top_logprobs": top}]},
                                  "finish_reason": "length"}],
                     "usage": {"prompt_tokens": 50, "completion_tokens": 1}}
    return 200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                 "usage": {"prompt_tokens": 50, "completion_tokens": 3}}


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (the http.server hook's name)
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
        if self.path.endswith("/chat/completions"):
            self.server.bodies.append(body)
            status, answer = _answer(self.server, body)
        else:
            status, answer = 404, {"error": "no such route"}
        raw = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self):  # noqa: N802
        self.send_response(404)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    started = []

    def start(kind: str) -> tuple[FakeServer, LLM]:
        httpd = FakeServer(("127.0.0.1", 0), _Handler)
        httpd.kind, httpd.bodies = kind, []
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        started.append(httpd)
        backend = OpenAICompatibleBackend("m", base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1",
                                          context_size=4096)
        return httpd, LLM(backend)

    yield start
    for httpd in started:
        httpd.shutdown()
        httpd.server_close()


TEXTS = ["Hamlet is a tragedy written by William Shakespeare.", "The Eiffel Tower is in Paris."]


def _grade(llm: LLM, texts=TEXTS, **stage) -> Trace:
    candidates = CandidateList(Query("who wrote hamlet"), [
        Candidate(Passage(f"d{i}", text), [StageScore("bm25", 10.0 - i, i + 1)]) for i, text in enumerate(texts)])
    trace = Trace()
    GradedRelevanceReranker(llm, **stage).rank(candidates, trace)
    return trace


def _grade_requests(httpd: FakeServer) -> list[dict]:
    return [b for b in httpd.bodies if "DOCUMENT" in json.dumps(b)]


def test_vllm_continues_the_started_score_and_is_asked_once(server):
    httpd, llm = server("vllm")
    stage = _grade(llm).stages[0]
    grades = _grade_requests(httpd)
    assert len(grades) == 2
    for body in grades:  # the paper's A.2 with "<<Score>>" started, and vLLM's fields
        assert body["messages"][-1] == {"role": "assistant", "content": "<<Score>>"}
        assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert stage.details.continuation == "continued (probe)" and stage.details.probe_calls == 1
    assert {g["argmax"] for g in stage.details.grades} == {4}
    assert {g["source"] for g in stage.details.grades} == {"logprobs"}
    assert len(stage.llm_calls) == 3  # the probe and two grades, in the stage's cost
    second = _grade(llm).stages[0]  # known now: no second probe
    assert second.details.probe_calls == 0 and len(httpd.bodies) == 5


def test_a_hosted_api_that_refuses_the_field_gets_the_first_token_prompt(server):
    httpd, llm = server("strict")
    stage = _grade(llm).stages[0]
    # Probe with the field (400), probe without the started turn (200), then two first-token prompts.
    assert [("continue_final_message" in b, b["messages"][-1]["role"]) for b in httpd.bodies[:2]] == [
        (True, "assistant"), (False, "user")]
    grades = _grade_requests(httpd)
    assert len(grades) == 2
    for body in grades:
        assert "continue_final_message" not in body and body["messages"][-1]["role"] == "user"
        assert "Answer with the score alone, as a single digit." in body["messages"][-1]["content"]
        assert "<<Score>>" not in body["messages"][-1]["content"]
    assert stage.details.continuation.startswith("refused: ") and "400" in stage.details.continuation
    # Both probes are counted; the refused one cost no tokens and is in no usage, the other is.
    assert stage.details.probe_calls == 2 and len(stage.llm_calls) == 3
    assert {g["argmax"] for g in stage.details.grades} == {4}


#: A.2's answer format as printed (the bare-digit variant replaces this sentence).
A2_FORMAT = ("Enclose the answer in <<Score>><</Score>>. For instance if you think the score should be 4, then "
             "answer <<Score>>4<</Score>>. Do not give any explanation.")


def _a2_as_printed(body: dict) -> bool:
    asked = body["messages"][-1]
    return asked["role"] == "user" and A2_FORMAT in asked["content"] and "continue_final_message" not in body


def test_a_hosted_api_can_be_sent_a2_as_printed_and_its_grade_parsed(server):
    """RRR App. A.2 asks the model to write "<<Score>>4<</Score>>"; where the started answer is refused,
    ``when_not_continued="generate"`` sends that prompt and parses the grade from the text written."""
    httpd, llm = server("strict")
    stage = _grade(llm, when_not_continued="generate").stages[0]
    grades = _grade_requests(httpd)
    assert len(grades) == 2 and all(_a2_as_printed(body) and not body.get("logprobs") for body in grades)
    assert stage.details.continuation.startswith("refused: ") and stage.settings["when_not_continued"] == "generate"
    assert [(g["argmax"], g["source"], g["answer"]) for g in stage.details.grades] == \
        [(4, "generated", "<<Score>>4<</Score>>")] * 2
    # A server that continues the started answer still gets it: the grade is then the next token.
    httpd, llm = server("vllm")
    stage = _grade(llm, when_not_continued="generate").stages[0]
    assert {g["source"] for g in stage.details.grades} == {"logprobs"}


def test_without_prefill_every_backend_gets_a2_as_printed_and_no_probe(server):
    httpd, llm = server("vllm")
    stage = _grade(llm, prefill=False).stages[0]
    assert len(httpd.bodies) == 2 and all(_a2_as_printed(body) for body in httpd.bodies)  # no probe
    assert stage.details.probe_calls == 0 and {g["argmax"] for g in stage.details.grades} == {4}


def test_rrr_relevance_answer_setting_reaches_the_stage(server, index):
    """``relevance_answer`` (RRR's σ): ``prefill-or-generate`` is the paper profile's, ``generate`` is
    GradedRelevanceReranker(prefill=False); a run on --backend openai with the default lists the
    bare-digit prompt among its deviations, one with the paper's choice does not."""
    from winnow.evaluation.labels import run_deviations
    from winnow.methods import build_method, method_settings
    from winnow.pipeline import RunSpec

    assert method_settings("rrr").relevance_answer == "prefill-or-digit"
    assert method_settings("rrr", profile="paper").relevance_answer == "prefill-or-generate"
    for setting, prefill, fallback in (("prefill-or-digit", True, "first-token"),
                                       ("prefill-or-generate", True, "generate"), ("generate", False, "generate")):
        relevance = build_method("rrr", index=index, llm=server("strict")[1], relevance_answer=setting).relevance
        assert (relevance.prefill, relevance.when_not_continued) == (prefill, fallback)
    httpd, llm = server("strict")
    answer = build_method("rrr", index=index, llm=llm, profile="paper", n=3, k=2, rewrites=1, rerank="none",
                          second_pass_depth=0).ask("capital of france")
    sigma = next(s for s in answer.trace.stages if s.name == "relevance")
    assert sigma.details.grades and {g["source"] for g in sigma.details.grades} == {"generated"}
    assert all(_a2_as_printed(body) for body in _grade_requests(httpd))

    def deviations(**run):
        return run_deviations(RunSpec.resolve(run={"method": "rrr", "model": "m", **run}))

    assert "bare digit" in deviations(backend="openai", base_url="http://x/v1")["relevance_answer"]
    assert "relevance_answer" not in deviations(backend="openai", base_url="http://x/v1", profile="paper")
    assert "relevance_answer" not in deviations()  # llama.cpp continues a started answer itself


def test_a_server_that_ignores_the_field_is_found_out_by_the_probe(server):
    httpd, llm = server("ignoring")
    stage = _grade(llm, TEXTS + ["CHATTY text"]).stages[0]
    assert stage.details.continuation == "not continued: the probe answered '1, 2, 3'"
    grades = {g["id"]: g for g in stage.details.grades}
    assert grades["d0"]["argmax"] == 4 and grades["d0"]["source"] == "logprobs"
    # The chatty answer "Score: 4" has its digit at the wrong position: unreadable, not 4.
    assert grades["d2"]["source"] == "generated" and grades["d2"]["readable"] is False
    assert grades["d2"]["argmax"] == 1 and stage.details.unreadable_grades == 1


def test_the_rewriter_drops_its_started_turn_on_a_server_that_refuses_it(server):
    httpd, llm = server("strict")
    state = QuestionState(Query("who wrote hamlet"))
    state.feedback = [("who wrote hamlet", [Passage("d0", TEXTS[0])])]
    QueryRewriter(llm).run([state])
    rewrite = httpd.bodies[-1]
    assert rewrite["messages"][-1]["role"] == "user" and "continue_final_message" not in rewrite
    assert state.search_text == "hamlet author"
    assert state.trace.stages[-1].details.continuation.startswith("refused: ")


def test_the_environment_switch_turns_the_prefill_off_without_a_probe(server, monkeypatch):
    monkeypatch.setenv("WINNOW_OPENAI_CONTINUE", "off")
    httpd, llm = server("vllm")
    stage = _grade(llm).stages[0]
    assert stage.details.continuation == "WINNOW_OPENAI_CONTINUE=off" and stage.details.probe_calls == 0
    assert len(httpd.bodies) == 2 and all("Answer with the score alone" in json.dumps(b) for b in httpd.bodies)



@pytest.mark.llm
def test_a_real_llama_cpp_server_is_found_to_continue_and_grades_as_in_process(llama_backend):
    # llama.cpp's server continues a started turn (returning the started part with it) and ignores
    # vLLM's field: the probe says so, and σ over HTTP reads the same next-token grades as in process.
    http = OpenAICompatibleBackend("smollm2", base_url=llama_backend.http_address + "/v1", max_inflight=1)
    try:
        remote = _grade(LLM(http), TEXTS[:1]).stages[0].details
        local = _grade(LLM(llama_backend), TEXTS[:1]).stages[0].details
    finally:
        http.close()
    assert remote.continuation == "continued (probe)" and remote.probe_calls == 1
    assert local.continuation == "llama.cpp continues a started turn itself" and local.probe_calls == 0
    for mine, theirs in zip(remote.grades, local.grades, strict=True):
        assert mine["source"] == theirs["source"] and mine["expected"] == pytest.approx(theirs["expected"], abs=1e-2)
