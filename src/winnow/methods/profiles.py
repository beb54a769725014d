"""Named presets of method settings: the values the papers ran with, reachable by one name.

Winnow's defaults are chosen for a laptop CPU (N = 20 everywhere). ``--profile paper`` (a config
file's ``profile = "paper"``, ``"profile"`` in an HTTP request, ``profile="paper"`` in Python) sets
each method's settings to its paper's instead. Precedence: the profile < a config file's settings <
``--set`` and named flags, so anything given explicitly overrides the profile.

Where the values come from:

* RankRAG (Yu et al., NeurIPS 2024) §5.1, Implementation Details: "retrieve top-N (100 for 8B and
  30 for 70B) documents for ranking" ... "set the maximum number of generated token to be 32 for
  OpenQA, 128 for ConvQA and 8 for others"; k = 5 from §1: "At inference, the LLM first reranks
  the retrieved contexts, then generates answer based on the refined top-k (e.g., 5)".
  ``paper`` is the 8B model on open-domain QA; ``paper-70b`` retrieves 30; the ``-fever`` and
  ``-convqa`` variants give the fact-verification and conversational answer lengths and set the
  ``task`` setting to match. For rankrag and vanilla a profile also sets ``framing = "plain"``:
  App. D prints its prompts as plain text, not through a chat template. An explicit ``task``
  (``--profile paper --task fever``) takes its own answer limit. The answer
  limit applies to every method that answers with RankRAG's D.2 reader (vanilla, rankrag, rankgpt,
  rrr): §5.1 sets it for all the systems it evaluates.
* GAR-meets-RAG / RRR (Arora et al., 2023) §4(D): "The best values for these parameters are
  N_rw = 5, τ = 1 (i.e., prune the least scoring ones), w = 10 and s = 5"; N = 100 from App. B
  ("N_rw*N = 500 calls"); the rewriter's "token limit 20" from Table 4. N_aug is not given a
  value in the paper, so Winnow's 3 stays. σ is A.2's integer grade: on a backend that cannot
  continue a started answer it is generated and parsed (``relevance_answer``), and S is ordered by
  it alone, ties in the order found (``sigma_ties = "found"``), not by E[σ] between equal grades.
* RankGPT (Sun et al., 2023) is a baseline of GAR-meets-RAG, whose numbers it quotes (§4(B):
  "we quote results from Thakur et al. (2021) and Sun et al. (2023) computed in identical
  setting"): BM25's top 100 reranked with a window of 20 and a step of 10, the defaults of the
  ``sliding_windows`` function of RankGPT's released code. Winnow's CPU defaults are RRR's h's
  (w = 10, s = 5, §4(D)).
* MAIN-RAG (Chang et al., ACL 2025, restated in the design brief): N = 20 retrieved documents and
  n = 0 in τ = mean − n·std.

``rankgpt-quoted`` is the RankGPT row RRR's Tables 1 and 3 quote from Sun et al. (DL20 nDCG@1/5/10
78.4/74.1/70.6, TREC-COVID nDCG@10 85.5), for ``rankgpt`` only (another method is refused). RRR
§4(C) names its process: "The re-ranker h follows the two-step process described in the RankGPT
paper: first, re-rank N documents … using GPT-3.5-Turbo; then, further re-rank the top 30
documents using GPT-4". So: BM25's top 100, a first pass (role ``rerank``) and a second over the
top 30 (role ``rerank2``), each with ``sliding_windows``' window 20 and step 10, rank_gpt.py's own
prompt (``listwise_prompt = "rankgpt"``, its "Title: … Content: …" passages included) and its
300-word cut. ``paper`` stays RankGPT as RRR's h runs it (A.3's prompt, one pass).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..settings import SettingError

#: RankRAG §5.1: "the maximum number of generated token to be 32 for OpenQA, 128 for ConvQA and 8 for others".
RANKRAG_ANSWER_TOKENS = {"openqa": 32, "fever": 8, "convqa": 128}
#: The ``task`` setting (RankRAG's Appendix D prompt variants) of each profile's task type.
TASK_SETTING = {"openqa": "qa", "fever": "fever", "convqa": "conversational"}
ANSWER_TOKENS_BY_TASK = {TASK_SETTING[task]: tokens for task, tokens in RANKRAG_ANSWER_TOKENS.items()}
#: RankRAG §5.1: "retrieve top-N (100 for 8B and 30 for 70B) documents for ranking".
RANKRAG_N = {"8b": 100, "70b": 30}


@dataclass(frozen=True)
class Profile:
    """A named preset: per method, the settings it sets (a method it does not name keeps its defaults)."""

    name: str
    summary: str
    settings: Mapping[str, Mapping[str, Any]]
    #: True for a profile of one paper row: a method it does not name is refused, not run on defaults.
    only_named: bool = False

    def applies_to(self, method: str) -> bool:
        """Whether ``method`` may run under this profile (a one-row profile names its method)."""
        return not self.only_named or method in self.settings

    def for_method(self, method: str) -> dict[str, Any]:
        if not self.applies_to(method):
            raise SettingError("profile", f"profile {self.name!r} has settings for method "
                                          f"{' and '.join(self.settings)} only, not {method!r}",
                               f"use --method {next(iter(self.settings))}, or --profile paper for {method}")
        return dict(self.settings.get(method, {}))


def _paper(size: str, task: str) -> Profile:
    reader = {"k": 5, "max_answer_tokens": RANKRAG_ANSWER_TOKENS[task]}
    # RankRAG's prompts as App. D prints them (plain text, not the chat template), for its task type.
    appendix_d = {"framing": "plain", "task": TASK_SETTING[task]}
    # The papers check no passage for prompt injection: the guard's flag (a trace entry) is Winnow's.
    no_guard = {"injection_guard": "off"}
    name = "-".join(part for part in ("paper", "" if size == "8b" else size, "" if task == "openqa" else task) if part)
    what = {"openqa": "open-domain QA", "fever": "FEVER-style fact verification",
            "convqa": "conversational QA"}[task]
    return Profile(name, f"the papers' settings; RankRAG {size.upper()} (N={RANKRAG_N[size]}) on {what} "
                         f"(answers of at most {RANKRAG_ANSWER_TOKENS[task]} tokens)", {
        "vanilla": {**reader, **appendix_d},
        # The tables' rows without retrieval: D.2's prompt and answer limit, no passages.
        "no-retrieval": {"max_answer_tokens": RANKRAG_ANSWER_TOKENS[task], **appendix_d},
        # §4.3: "the probability of generating the answer as True", not renormalised over True/False.
        "rankrag": {"n": RANKRAG_N[size], **reader, **appendix_d, "score": "raw", **no_guard},
        # The judge's user turn ends at the LLM Answer: Appendix C adds no request (judge_sentence).
        "mainrag": {"n": 20, "judge_n": 0.0, "judge_sentence": "none", **no_guard},
        "mainrag-unfiltered": {"n": 20},
        # §4(C): h re-ranks all N, then "further re-rank the top 30 documents" (the rerank2 role). σ as
        # A.2 prints it where a backend cannot continue "<<Score>>", and S ordered by the integer σ alone.
        "rrr": {"n": 100, "rewrites": 5, "tau": 1.0, "window": 10, "step": 5, "max_rewrite_tokens": 20,
                "second_pass_depth": 30, "relevance_answer": "prefill-or-generate", "sigma_ties": "found",
                **reader, **no_guard},
        "rankgpt": {"n": 100, "window": 20, "step": 10, **reader, **no_guard},
    })


def _rankgpt_quoted() -> Profile:
    # RankGPT's released sliding_windows(window_size=20, step=10) for both passes; RRR §4(C)'s depth 30.
    # The reader (k, answer tokens) is the paper profile's: the quoted rows are retrieval metrics only.
    return Profile("rankgpt-quoted", "rankgpt only: the RankGPT row RRR's Tables 1 and 3 quote (Sun et al.): "
                                     "top 100, window 20, step 10, rank_gpt.py's prompt, then the top 30 again on "
                                     "the rerank2 model (GPT-4 after GPT-3.5-Turbo)", {
        "rankgpt": {"n": 100, "window": 20, "step": 10, "max_passage_words": 300, "listwise_prompt": "rankgpt",
                    "second_pass_depth": 30, "k": 5, "max_answer_tokens": RANKRAG_ANSWER_TOKENS["openqa"],
                    "injection_guard": "off"},
    }, only_named=True)


PROFILES: dict[str, Profile] = {p.name: p for p in (*(_paper(size, task) for size in RANKRAG_N
                                                     for task in RANKRAG_ANSWER_TOKENS), _rankgpt_quoted())}


def profile_named(name: str) -> Profile:
    """The profile called ``name``, or a SettingError (setting ``profile``) listing the profiles."""
    if name not in PROFILES:
        raise SettingError("profile", f"unknown profile {name!r}", f"choose one of: {', '.join(PROFILES)}")
    return PROFILES[name]


def profile_settings(name: str | None, method: str, task: Any = None) -> dict[str, Any]:
    """The settings profile ``name`` gives ``method`` (none for no profile). A ``task`` given
    explicitly (``--task fever`` with ``--profile paper``) also picks §5.1's answer limit for it,
    where the profile sets the task."""
    values = profile_named(name).for_method(method) if name else {}
    if task is not None and "task" in values:
        values["task"] = task
        values["max_answer_tokens"] = ANSWER_TOKENS_BY_TASK.get(task, values["max_answer_tokens"])
    return values
