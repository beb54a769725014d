"""Fitting a prompt's passages to the model's context, by a stated rule, with a record of every cut.

The rule. A prompt is instructions, a question and passages, and the model must also have room for
its answer. Only passage texts are ever cut; the instructions, the question and passage titles are
kept whole. The room left for passage texts, ``context_size - output_tokens - (tokens of the prompt
with every passage text emptied)``, is shared out as one per-passage token budget: the largest
budget ``b`` such that the passages, each cut to at most ``b`` tokens, fill no more than the room.
A passage shorter than ``b`` keeps its whole text and leaves its share to the longer ones (equal
shares would waste it). ``max_passage_tokens`` caps ``b`` further, even when everything would fit.
Each cut passage keeps its first ``b`` tokens.

RankGPT (Sun et al., 2023) truncates every passage to its first 300 words so that a window of 20
fits the model; we cut by the same principle, measured in the model's own tokens (its tokenizer,
its chat template), so the prompt provably fits rather than probably. The whole rendered prompt is
measured after cutting; where tokens merge differently at a passage's edges, the room shrinks by
the excess and the passages are cut again.

When even the prompt without passage texts leaves no room, nothing sensible can be sent: a
:class:`PromptDoesNotFit` names the context size and how to raise it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..errors import BackendError
from ..llm.client import LLM
from ..llm.messages import Prompt, prompt_chars
from ..records import Passage

Render = Callable[[Sequence[Passage]], Prompt]

#: Passages longer than this many characters are not counted whole for the record (a 50 MB text
#: takes a minute to tokenize); ``tokens_before`` is then None and ``chars_before`` gives the size.
COUNT_LIMIT_CHARS = 1_000_000
#: Re-cuts allowed when the measured prompt overflows by a few boundary tokens.
ATTEMPTS = 8
#: Below this many tokens (about 50 words) a cut passage says little; the record warns.
SMALL_BUDGET = 64


@dataclass(frozen=True)
class PassageCut:
    """One passage cut to fit: its id, and its length before and after in tokens and characters."""

    passage_id: str
    tokens_before: int | None  # None: longer than COUNT_LIMIT_CHARS, not counted
    tokens_after: int
    chars_before: int
    chars_after: int


@dataclass(frozen=True)
class FittedPassages:
    """The passages as they fit, and the record of what fitting them did (for the trace)."""

    passages: list[Passage]
    cuts: list[PassageCut]
    prompt_tokens: int  # the rendered prompt with the fitted passages, in the model's count
    output_tokens: int
    context_size: int
    context_size_source: str
    passage_budget: int | None  # the per-passage token budget applied; None if no passage had to be cut
    token_counting: str  # "exact: …" or "estimated …"
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "context_size": self.context_size,
            "context_size_source": self.context_size_source,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "passage_budget": self.passage_budget,
            "token_counting": self.token_counting,
            "cut": [vars(cut) for cut in self.cuts],
            **({"notes": self.notes} if self.notes else {}),
        }


def largest_budget(sizes: Sequence[int], room: int, cap: int) -> int:
    """The largest ``b <= cap`` with ``sum(min(size, b)) <= room`` (water-filling: short passages
    keep their length, the long ones share what is left equally)."""
    remaining = room
    ordered = sorted(sizes)
    for i, size in enumerate(ordered):
        share = remaining // (len(ordered) - i)
        if size > share:
            return max(0, min(share, cap))
        remaining -= size
    return cap


class PromptDoesNotFit(BackendError):
    """A prompt whose instructions and question alone leave no room in the model's context: the
    model cannot be asked it. Like a backend's refusal it fails one question, which ``winnow eval``
    records and skips, not the whole run."""


def _no_room(llm: LLM, fixed: int, output_tokens: int) -> PromptDoesNotFit:
    return PromptDoesNotFit(
        f"the prompt without its passages (instructions, question, titles) takes {fixed} tokens and the answer "
        f"{output_tokens}, which leaves no room for passage text in the model's context of {llm.context_size} "
        f"tokens ({llm.context_size_source})",
        "raise the context size with the context_size option (llama.cpp in-process allocates what you ask, up "
        "to what the model was trained on; an OpenAI-compatible server is bound by its own setting, e.g. "
        "llama-server -c N or vLLM --max-model-len N), or ask a shorter question")


def _sizes(llm: LLM, passages: Sequence[Passage], cap: int) -> list[int]:
    """Each passage's tokens, or ``cap + 1`` for one longer than ``cap`` (not counted further)."""
    sizes = []
    for passage in passages:
        _, longer = llm.truncate_tokens(passage.text, cap)
        sizes.append(cap + 1 if longer else llm.count_tokens(passage.text))
    return sizes


def _cut_to(llm: LLM, passages: Sequence[Passage], sizes: Sequence[int], budget: int
            ) -> tuple[list[Passage], list[PassageCut]]:
    fitted, cuts = [], []
    for passage, size in zip(passages, sizes, strict=True):
        if size <= budget:
            fitted.append(passage)
            continue
        text, _ = llm.truncate_tokens(passage.text, budget)
        before = llm.count_tokens(passage.text) if len(passage.text) <= COUNT_LIMIT_CHARS else None
        fitted.append(passage.with_text(text))
        cuts.append(PassageCut(passage.id, before, llm.count_tokens(text), len(passage.text), len(text)))
    return fitted, cuts


def fit_passages(llm: LLM, render: Render, passages: Sequence[Passage], *, output_tokens: int,
                 max_passage_tokens: int | None = None) -> FittedPassages:
    """``passages`` cut so that ``render(passages)`` plus ``output_tokens`` fit ``llm.context_size``.

    ``render`` builds the whole chat prompt (instructions, question, passages) from a list of
    passages, as the stage will send it; the rule is in the module notes. Raises PromptDoesNotFit when
    the prompt without passage texts leaves no room.
    """
    if output_tokens < 0:
        raise ValueError(f"output_tokens must be at least 0 (got {output_tokens})")
    passages = list(passages)
    fixed = llm.count_prompt_tokens(render([p.with_text("") for p in passages]))
    room = llm.context_size - output_tokens - fixed
    if room <= 0 or room < len(passages):  # not even one token of text per passage
        raise _no_room(llm, fixed, output_tokens)
    cap = room if max_passage_tokens is None else min(room, max_passage_tokens)
    sizes = _sizes(llm, passages, cap)
    notes: list[str] = []
    for _ in range(ATTEMPTS):
        budget = largest_budget(sizes, room, cap)
        fitted, cuts = _cut_to(llm, passages, sizes, budget)
        total = llm.count_prompt_tokens(render(fitted))
        excess = total + output_tokens - llm.context_size
        if excess <= 0:
            if cuts and budget < SMALL_BUDGET:
                notes.append(f"{len(cuts)} passage(s) cut to {budget} tokens each: a context of {llm.context_size} "
                             f"tokens is small for {len(passages)} passage(s) in one prompt")
            return FittedPassages(fitted, cuts, total, output_tokens, llm.context_size, llm.context_size_source,
                                  budget if cuts else None, llm.token_counting, notes)
        # Tokens merged differently at passage edges than counted alone: shrink the room and recut.
        notes.append(f"the prompt came to {total} tokens with budget {budget}, {excess} over; cut again")
        room -= excess
        if room < len(passages):
            break
    raise _no_room(llm, fixed, output_tokens)


#: Tokens a chat template may add around the messages' text (role markers, a default system
#: prompt). A prompt whose characters plus this margin fit is sure to fit: a token covers at least
#: one character, so it is sent without being counted.
TEMPLATE_MARGIN = 64


def fit_prompt(llm: LLM, render: Render, passages: Sequence[Passage], *, output_tokens: int,
               fitted: list[dict[str, Any]]) -> list[Passage]:
    """The passages to render for one prompt: unchanged when the prompt surely fits, else cut by
    :func:`fit_passages`, with every cut appended to ``fitted`` (a stage's ``details.fitted``)."""
    passages = list(passages)
    characters = prompt_chars(render(passages))
    if characters + output_tokens + TEMPLATE_MARGIN <= llm.context_size:
        return passages
    fit = fit_passages(llm, render, passages, output_tokens=output_tokens)
    fitted.extend({**vars(cut), "context_size": fit.context_size, "passage_budget": fit.passage_budget,
                   "token_counting": fit.token_counting} for cut in fit.cuts)
    return fit.passages


def fit_one_passage(llm: LLM, render: Callable[[Passage], Prompt], passage: Passage, *, output_tokens: int,
                    fitted: list[dict[str, Any]]) -> Passage:
    """:func:`fit_prompt` for a prompt about a single passage (a judge's or a grader's)."""
    [kept] = fit_prompt(llm, lambda passages: render(passages[0]), [passage], output_tokens=output_tokens,
                        fitted=fitted)
    return kept
