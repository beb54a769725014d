"""The LLM interface every backend implements: two verbs over batches of prompts (chat turns, or
plain text sent as a raw completion: :mod:`.messages`).

``generate`` returns text; ``choice_logprobs`` returns the log-probability of each of a closed set
of next-token choices (True/False, Yes/No, 1..5), renormalised over the set. The second verb is what
RankRAG (§4.3, P("True")), MAIN-RAG (log P("Yes") - log P("No")) and RRR's graded relevance (A.2)
need, and it costs one forward pass and a single output token per prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from .messages import Messages as Messages  # re-exported: stages import the chat prompt type from here
from .messages import Prompt

if TYPE_CHECKING:
    from .tokens import TokenCounter



@dataclass(frozen=True, slots=True)
class Generation:
    """Generated text, what it cost, and why it ended: ``finish_reason`` is "stop" (the model ended
    its answer or hit a stop string), "length" (``max_tokens`` cut it) or "" (the server did not say)."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    finish_reason: str = ""
    retries: int = 0  # times a passing server failure made the request go again (llm.dispatch)


@dataclass(frozen=True, slots=True)
class ChoiceScores:
    """Next-token log-probabilities over a closed set of choices, renormalised to sum to one.

    ``missing`` lists choices that were not among the model's top candidates: they were given the
    lowest log-probability seen, an upper bound, and the trace says so.
    """

    logprobs: dict[str, float]
    prompt_tokens: int
    seconds: float
    missing: tuple[str, ...] = ()
    raw_top: dict[str, float] = field(default_factory=dict)
    retries: int = 0
    #: Each choice's log-probability before renormalisation (RankRAG §4.3's raw P("True")); empty in
    #: cache entries written before it was kept.
    raw_logprobs: dict[str, float] = field(default_factory=dict)

    def probability(self, choice: str) -> float:
        import math

        return math.exp(self.logprobs[choice])


class LLMBackend(Protocol):
    """A language model that can be asked two things. Implementations must be deterministic at
    temperature 0 so that the call cache is sound.

    Each also says how many tokens its context holds (prompt and answer together; see
    :mod:`winnow.llm.context_size`) and counts tokens with the model's own tokenizer (``tokens``,
    see :mod:`winnow.llm.tokens`), so that stages can fit prompts to the context.
    """

    # Read-only to callers: a plain attribute or a property (the HTTP backend asks the server lazily).
    @property
    def context_size(self) -> int:
        """Tokens of prompt and answer together that the model's context holds."""

    @property
    def context_size_source(self) -> str:
        """Where ``context_size`` came from, for the trace."""

    @property
    def tokens(self) -> TokenCounter:
        """Counts tokens with the model's own tokenizer."""

    @property
    def identity(self) -> dict[str, Any]:
        """What makes two backends' answers interchangeable: kind, model name and checksum."""

    def generate(self, prompts: Sequence[Prompt], *, max_tokens: int, temperature: float = 0.0,
                 stop: Sequence[str] = ()) -> list[Generation]:
        """Complete each prompt (chat turns through the chat template, plain text as it is);
        ``finish_reason`` is "length" when ``max_tokens`` cut the answer."""

    def choice_logprobs(self, prompts: Sequence[Prompt], choices: Sequence[str]) -> list[ChoiceScores]:
        """Score the next token of each prompt over ``choices``."""

    def close(self) -> None:
        """Release the model or connection."""
