"""The web inspector end to end: a real browser asks a real server (smollm2-135m) a question.

Drives Debian's Chromium through Playwright (never a downloaded browser) against `winnow serve`
on 127.0.0.1, checks that the answer and every stage render, and saves a screenshot of the page: in the test's
temporary folder, or with WINNOW_UPDATE_SCREENSHOT=1 as docs/inspector.png, the one the docs show
(so a test run never rewrites a tracked file by accident).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from service_server import build_small_index, running_server

pytestmark = [pytest.mark.llm, pytest.mark.subprocess]  # `winnow serve` in a process of its own

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
DOCS_SCREENSHOT = Path(__file__).resolve().parents[1] / "docs" / "inspector.png"
QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("inspector")
    with running_server(build_small_index(folder), folder / "cache") as base:
        yield base


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, server):
    """A fresh context (its own storage) on the inspector; fails the test on any script error."""
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text)  # a refused request's 4xx is logged too: expected
            if msg.type == "error" and not msg.text.startswith("Failed to load resource") else None)
    page.goto(server + "/")
    page.wait_for_selector("#server .dot.ok")
    page.wait_for_selector("#method option", state="attached")  # /v1/methods answered and rendered
    yield page
    context.close()
    assert not errors, errors


def ask(page, question: str, method: str, n: int, k: int, max_answer_tokens: int | None = None) -> None:
    page.select_option("#method", method)
    page.fill("#n", str(n))
    page.fill("#k", str(k))
    if max_answer_tokens is not None:
        page.click("#more summary")
        page.fill("input[data-setting=max_answer_tokens]", str(max_answer_tokens))
        page.click("#more summary")
    page.fill("#question", question)
    page.click("#ask-button")


def test_asking_shows_the_answer_and_every_stage(page, tmp_path):
    assert "smollm2-135m" in page.inner_text("#server")
    assert {"vanilla", "rankrag", "mainrag", "rrr", "rankgpt"} <= set(page.eval_on_selector_all(
        "#method option", "options => options.map(o => o.value)"))
    assert page.input_value("#method") == "rankrag"  # the server's default method
    ask(page, QUESTION, "rankrag", n=4, k=2, max_answer_tokens=8)
    page.wait_for_selector("#result:not([hidden])", timeout=120_000)

    assert page.inner_text("#answer").strip() not in ("", "(no answer)")
    assert "N=4 · k=2" in page.inner_text("#answer-meta")
    assert "computed by the model" in page.inner_text("#answer-meta")
    stages = page.locator("#stages .stage-name").all_inner_texts()
    assert stages == ["retrieve", "rerank", "generate"]
    # The journey table: every retrieved passage, a column per ranking stage, the two read marked.
    assert page.locator("table.journey th.stage-col").all_inner_texts() == ["bm25", "rerank"]
    rows = page.locator("table.journey tbody tr")
    assert rows.count() == 4
    assert page.locator("table.journey tr.in").count() == 2
    read = page.locator("table.journey tr.in td.outcome").all_inner_texts()
    assert read == ["read as #1", "read as #2"]
    assert page.locator("#details section.detail").count() == 3
    assert page.locator("#calls table.calls tbody tr").count() == 4 + 1  # 4 P("True") + 1 answer
    assert page.locator("#cost .stat .value").first.inner_text() == "5"
    assert "null" not in page.inner_text("#cost")  # a missing note must not print as "null"
    trace_id = re.search(r"#trace=([0-9a-f]{16})$", page.url).group(1)
    assert page.inner_text("#answer-meta a.chip").endswith(trace_id)

    screenshot = DOCS_SCREENSHOT if os.environ.get("WINNOW_UPDATE_SCREENSHOT") == "1" else tmp_path / "inspector.png"
    page.screenshot(path=str(screenshot), full_page=True)
    assert screenshot.stat().st_size > 10_000  # a rendered page, not an empty image

    # The same request again is answered from the answer cache; a reload shows the trace by id.
    page.click("#ask-button")
    page.wait_for_function("document.querySelector('#answer-meta').innerText.includes('answer cache')")
    # Reading one passage instead of two: the four P("True") calls come from the call cache, and the
    # cost panel says what they cost when first asked.
    page.fill("#k", "1")
    page.click("#ask-button")
    page.wait_for_function("document.querySelector('#answer-meta').innerText.includes('k=1')", timeout=120_000)
    page.wait_for_function("document.querySelector('#cost').innerText.includes('first cost')")
    assert "The 4 cached call(s) first cost" in page.inner_text("#cost")
    page.goto(page.url.split("#")[0] + f"#trace={trace_id}")
    page.reload()
    page.wait_for_selector("#result:not([hidden])")
    assert page.locator("#stages .stage-name").all_inner_texts() == ["retrieve", "rerank", "generate"]
    assert page.input_value("#question") == QUESTION


def test_a_refused_request_shows_the_error_and_its_field(page):
    ask(page, QUESTION, "rankrag", n=2, k=3)  # k above n: refused before any model work
    page.wait_for_selector("#error:not([hidden])")
    message = page.inner_text("#error")
    assert "setting 'k' (3) cannot exceed setting 'n' (2)" in message and "(field: k)" in message
    assert page.is_hidden("#progress") and page.inner_text("#ask-button") == "Ask"
