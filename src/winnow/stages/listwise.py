"""Listwise reranking by permutation generation: RankGPT (Sun et al., 2023), RRR's re-ranker h.

The model reads a window of passages as a conversation (RRR Appendix A.3: one user turn "[i]
passage" per passage, each acknowledged) and answers with a ranking, "[2] >> [1] >> …" as A.3 asks
(RankGPT's own prompt asks for "[2] > [1] > …"; either is read). Windows slide from the back of
the list to the front (window w, step s; RRR §4(D): w = 10, s = 5), so a relevant passage near the
bottom can bubble up by w - s places per window. Unlike RankGPT's own loop, the final partial
window at the front is ranked too, so every passage is seen at least once.
"""

from __future__ import annotations

import re
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..details import ListwiseDetails
from ..llm.client import LLM
from ..llm.messages import Messages
from ..prompts import ListwisePromptTemplate, listwise_prompt
from ..records import Passage, StageTrace
from ..settings import SettingError
from .contract import ListStage, QuestionState, recording
from .fitting import fit_prompt

_INTEGER = re.compile(r"[0-9]+")  # ASCII only: str.isdigit() also accepts "²", which int() refuses
#: The most questions whose windows flow at once however large the server: each holds a thread.
MAX_FLOWING = 1024

Work = tuple[QuestionState, StageTrace, list[int], tuple[int, int]]


def sliding_windows(n: int, window: int, step: int) -> list[tuple[int, int]]:
    """The ``[start, end)`` windows over ``n`` ranked items, back of the list first.

    Each window ends ``step`` before the previous one; the last is the one that reaches the front,
    even when shorter than ``window`` (RankGPT's ``while start_pos >= rank_start`` loop skips it,
    leaving the first passages unranked whenever (n - w) is not a multiple of s).
    """
    if window < 1 or step < 1:
        raise ValueError(f"window and step must be at least 1 (got window={window}, step={step})")
    if step > window:
        raise ValueError(f"step {step} > window {window} would leave passages no window sees")
    windows: list[tuple[int, int]] = []
    end = n
    while end > 0:
        start = max(0, end - window)
        windows.append((start, end))
        if start == 0:
            break
        end -= step
    return windows


def _ids_given(text: str, n: int) -> list[int]:
    """The 0-based ids the answer names, in order, without out-of-range ids and repeats."""
    width = len(str(n))
    given: list[int] = []
    seen: set[int] = set()
    for digits in _INTEGER.findall(text):
        stripped = digits.lstrip("0") or "0"
        # A digit run longer than any id is out of range; skipping it also spares int() a huge number.
        if len(stripped) > width:
            continue
        index = int(stripped) - 1
        if 0 <= index < n and index not in seen:
            given.append(index)
            seen.add(index)
    return given


def parse_permutation(text: str, n: int) -> list[int]:
    """The 0-based permutation of ``range(n)`` a ranking answer such as "[2] > [3] > [1]" states.

    RankGPT's repair (``receive_permutation``): keep the integers in order as 1-based ids, drop
    out-of-range ids and repeats, then append the ids the answer left out in their previous order.
    Any text gives a permutation; an answer without ids keeps the previous order.
    """
    given = _ids_given(text, n)
    named = set(given)
    return given + [i for i in range(n) if i not in named]


#: The listwise prompts a method may choose (``--set listwise_prompt=…``): RRR App. A.3 as printed
#: (the papers' default), or rank_gpt.py as RankGPT released it, which repeats the query before the
#: instruction and uses ">" as the separator.
LISTWISE_PROMPTS = {"rrr": "rrr.listwise", "rankgpt": "rrr.listwise_rankgpt"}


def check_listwise_prompt(choice: object) -> str:
    """The template name for a ``listwise_prompt`` setting; anything else is refused, naming it."""
    if choice not in LISTWISE_PROMPTS:
        raise SettingError("listwise_prompt",
                           f"setting 'listwise_prompt' must be one of {', '.join(LISTWISE_PROMPTS)} (got {choice!r})",
                           "rrr: the RRR paper's App. A.3 prompt (default); rankgpt: rank_gpt.py's prompt")
    return LISTWISE_PROMPTS[choice]


def ranking_token_budget(num: int) -> int:
    """Output tokens enough for a ranking of ``num`` ids, "[10] > [9] > … > [1]".

    Per id: "[" (or " ["), one token per digit (SmolLM2, Qwen and Llama-2 split numbers into
    digits), "]" and the " >" separator; measured on SmolLM2: 40 tokens for 10 ids, 90 for 20. A few
    tokens spare for an end-of-turn or stray space. A model that babbles is cut off, not paid for.
    """
    return sum(3 + len(str(i)) for i in range(1, num + 1)) + 5


def unchanged_warning(details: ListwiseDetails) -> None:
    """Count the windows the model ranked, repaired and left as they were; warn when it changed nothing.

    Small models often answer the listwise prompt with the format's example ("[1] > [2]") or the
    identity order; the repair then keeps the previous order and the stage costs calls for nothing.
    Saying so in the trace (and, through ``winnow eval``, in reports) keeps that from passing unseen.
    """
    sent = [w for w in details.windows if "permutation" in w]
    unchanged = sum(w["permutation"] == sorted(w["permutation"]) for w in sent)
    repaired = sum(w["repaired"] for w in sent)
    details.windows_sent, details.windows_unchanged, details.windows_repaired = len(sent), unchanged, repaired
    if sent and unchanged == len(sent):
        details.warning = (f"the model left the order unchanged in all {len(sent)} window(s) ({repaired} of its "
                           f"answers named too few passages and were completed in the previous order): this "
                           f"stage changed nothing. Listwise ranking needs a model that follows the format.")


def flowing_questions(llm: LLM, questions: int) -> int:
    """How many of ``questions`` to keep flowing at once through a listwise stage on ``llm``: 1 (the
    lock-step of a model in process, which decodes a window of every question as one batch) unless
    the backend takes concurrent callers; then all of them (up to :data:`MAX_FLOWING`).

    All, not a multiple of the server's slots: the batch is in memory already, and a question's
    windows are a chain of dependent calls, so the end of a batch is set by the questions that
    started last. With every question started at once, the dispatcher's queue (first come, first
    served) sends every question's first window before any second one, and the last wave is of
    last windows that are all ready. With twice the slots in progress (128 of 277 questions at 64
    slots), a question admitted late still had three windows to go when the others were done: the
    slots were a third busy for the last 2.5 s, 1.18x the server's floor against 1.05x now
    (bench/bench_rank_llm.py, docs/benchmarks.md)."""
    backend = llm.backend
    if questions < 2 or not getattr(backend, "concurrent_callers", False):
        return 1
    return max(1, min(questions, MAX_FLOWING))


@dataclass
class ListwiseReranker(ListStage):
    """RankGPT sliding-window listwise reranking (Sun et al., 2023) with the RRR App. A.3 prompt.

    One LLM call per window holding two or more passages (a single passage has no order to ask
    about). A question's windows run one after another (each sees the order the previous left).
    Over a batch, against a server that takes concurrent callers, each question's windows *flow*:
    its next window is fitted and sent the moment its previous one returns, whatever the other
    questions' windows are doing (:meth:`_flow`); a model in process gets the j-th windows of all
    questions together (it decodes them as one batch). Either way a question's windows, prompts and
    ranking are the same. The output score is rank-based (n for the top passage down to 1), only
    there to carry the order through :meth:`CandidateList.ranked_by`.
    """

    llm: LLM
    window: int = 10  # w (RRR §4(D); RankGPT's released code: 20)
    step: int = 5  # s (RRR §4(D); RankGPT's released code: 10)
    max_words: int = 300  # RankGPT truncates each passage to its first 300 words
    keep: int | None = None  # top-k to keep after reranking; None keeps all
    name: str = "listwise"
    template: ListwisePromptTemplate = field(default_factory=lambda: listwise_prompt("rrr.listwise"))

    def run(self, batch: Sequence[QuestionState]) -> None:
        settings = {"window": self.window, "step": self.step, "max_words": self.max_words, "keep": self.keep,
                    "prompt": self.template.name, "order": "back to front, final partial window included"}
        with recording(batch, self.name, "listwise", settings) as traces:
            orders = [list(range(len(state.ranked))) for state in batch]  # indexes into each list, best first
            plans = [sliding_windows(len(order), self.window, self.step) for order in orders]
            chains = [[(batch[i], traces[i], orders[i], span) for span in plans[i]] for i in range(len(batch))]
            workers = flowing_questions(self.llm, len(batch))
            if workers > 1:
                self._flow(chains, workers)
            else:
                for j in range(max((len(p) for p in plans), default=0)):
                    self._rank_windows([chain[j] for chain in chains if j < len(chain)])
            for state, stage, order in zip(batch, traces, orders, strict=True):
                unchanged_warning(stage.details_as(ListwiseDetails))
                n = len(order)
                scores = [0.0] * n
                for position, i in enumerate(order):
                    scores[i] = float(n - position)
                state.candidates = state.ranked.ranked_by(self.name, scores, keep=self.keep)
                stage.output = state.ranked.to_dicts()

    def _flow(self, chains: list[list[Work]], workers: int) -> None:
        """Each question's windows in turn on ``workers`` threads, the questions admitted in order;
        the model's dispatcher alone bounds the calls on the wire (``--max-inflight``). Progress is
        reported to this thread's hook as windows over the whole batch; the first failure (a
        cancelled `winnow serve` request's hook raises) stops every question at its next window."""
        hook = self.llm.progress_hook
        stopped = threading.Event()
        total = sum(end - start > 1 for chain in chains for *_, (start, end) in chain)
        done = [0]
        lock = threading.Lock()

        def report(stage: str, _done: int, _total: int) -> None:
            with lock:
                done[0] += 1
                count = done[0]
            if hook is not None:
                hook(stage, count, total)

        def one(chain: list[Work]) -> None:
            with self.llm.reporting_to(report):
                for work in chain:
                    if stopped.is_set():
                        return
                    self._rank_windows([work])

        pool = ThreadPoolExecutor(workers, thread_name_prefix="winnow-listwise")
        try:
            futures = [pool.submit(one, chain) for chain in chains if chain]
            finished, _ = wait(futures, return_when=FIRST_EXCEPTION)
            failure = next((f.exception() for f in finished if f.exception() is not None), None)
            if failure is not None:
                raise failure
        finally:
            stopped.set()
            pool.shutdown(wait=False, cancel_futures=True)

    def _rank_windows(self, work: list[Work]) -> None:
        """One window of each question: fitted, the calls sent together, each order updated in place."""
        records = []
        for state, _, order, (start, end) in work:
            records.append({"start": start, "end": end, "ids": [state.ranked.candidates[i].passage.id
                                                                 for i in order[start:end]]})
        asked = [k for k, (_, _, order, (start, end)) in enumerate(work) if end - start > 1]
        prompts, budgets = [], []
        for k in asked:
            state, _, order, (start, end) = work[k]
            budget = ranking_token_budget(end - start)

            def render(ps: Sequence[Passage], q: str = state.query.text) -> Messages:
                return self.template.messages(q, ps, max_words=self.max_words)

            window = fit_prompt(self.llm, render, [state.ranked.candidates[i].passage for i in order[start:end]],
                                output_tokens=budget, fitted=work[k][1].details.fitted)
            prompts.append(render(window))
            budgets.append(budget)
        # Windows of different sizes get different output budgets: one call per budget.
        generations: dict[int, Any] = {}
        for budget in sorted(set(budgets)):
            group = [k for k, b in zip(asked, budgets, strict=True) if b == budget]
            answers = self.llm.generate([prompts[asked.index(k)] for k in group], max_tokens=budget,
                                        stage=[work[k][1] for k in group])
            generations.update(zip(group, answers, strict=True))
        for k, (state, stage, order, (start, end)) in enumerate(work):
            record = records[k]
            in_window = order[start:end]
            if k in generations:
                text = generations[k].text
                permutation = parse_permutation(text, len(in_window))
                given = len(_ids_given(text, len(in_window)))
                order[start:end] = [in_window[p] for p in permutation]
                record.update(response=text, permutation=permutation, ids_given=given,
                              repaired=given < len(in_window), max_tokens=ranking_token_budget(len(in_window)))
            else:
                record["skipped"] = "a single passage: nothing to rank"
            record["ranked_ids"] = [state.ranked.candidates[i].passage.id for i in order[start:end]]
            stage.details_as(ListwiseDetails).windows.append(record)
