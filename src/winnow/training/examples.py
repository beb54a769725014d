"""RankRAG's unified (question x, context c, answer y) format as chat examples (§4.2, Table 1, App. C.2).

Every Stage-II task becomes one conversation: the system turn, a user turn holding the context and
the task's instruction with the question, and the assistant turn holding the target. Conversational
data keep their earlier turns (the context goes into the first user turn, as the appendix prints
it). The loss falls only on the last assistant turn (§4.1), so an example is stored as its messages
with the target last.

Retrieval-augmented QA is asked as the paper trains it, "Answer the following question from
context. {question}" (Table 1, Appendix C.2 2): ``rankrag_train.rag_qa``), not with the inference
prompt of Appendix D.2 ("{question}. Answer the above question with a short phrase."). A blend may
still ask for the inference prompt (``RAG_QA_PROMPTS["inference"]``): a model tuned briefly, as on a
CPU, may not carry the task over to the other wording, and then trains best on what it will be
asked. Context ranking's training prompt (C.2 3) is D.1's text, so both use ``rankrag.context_ranking``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

from ..prompts import PromptTemplate, plain_layout, prompt
from ..records import Passage, Turn

Messages = list[dict[str, str]]

# The paper's targets for context ranking (Table 1: "True/False").
TRUE, FALSE = "True", "False"
ANSWER_STYLES = ("short", "long", "number", "mixed")  # Appendix C.2 1): the instruction per answer type
# The prompt of retrieval-augmented QA examples: the paper's training prompt (default) or D.2's.
RAG_QA_PROMPTS = {"training": "rankrag_train.rag_qa", "inference": "rankrag.rag"}


@dataclass(frozen=True, slots=True)
class ChatExample:
    """One training conversation; the last message is the assistant's target."""

    component: str
    messages: Messages
    question: str  # the bare question, for the contamination check
    #: The first user turn opens with this many characters of context (then a blank line): what the
    #: plain framing sets apart as its own block (:func:`winnow.prompts.plain_layout`).
    context_chars: int = 0

    def to_dict(self, example_id: str) -> dict[str, Any]:
        return {"id": example_id, "component": self.component, "messages": self.messages,
                "context_chars": self.context_chars}


def conversation(template: PromptTemplate, question: str, passages: Sequence[Passage], answer: str,
                 history: Sequence[dict[str, str]] = ()) -> Messages:
    """The chat for ``template`` with ``answer`` as the final assistant turn.

    Without ``history`` this is exactly ``template.messages(question, passages)`` plus the answer,
    which is what a method sends at inference. With it, the context opens the first user turn and
    the earlier turns follow (Appendix C.2 1 and the conversational form of D.1): the layout of a
    conversational template at inference, given here to any template the recipe puts a dialogue in.
    """
    turns = [Turn(turn["role"], turn["content"]) for turn in history]
    with_dialogue = replace(template, dialogue=True) if turns else template
    return [*with_dialogue.messages(question, passages, turns), {"role": "assistant", "content": answer}]


def _example(component: str, template: PromptTemplate, question: str, passages: Sequence[Passage], answer: str,
             history: Sequence[dict[str, str]] = ()) -> ChatExample:
    return ChatExample(component, conversation(template, question, passages, answer, history), question,
                       len(template.context(passages)))


def context_qa(component: str, question: str, passage: Passage, answer: str, *, style: str = "short",
               history: Sequence[dict[str, str]] = ()) -> ChatExample:
    """Context-rich QA (§4.2 part 2): a gold passage, the question, a short answer."""
    return _example(component, prompt(f"rankrag_train.context_qa_{style}"), question, [passage], answer, history)


def rag_qa(component: str, question: str, passages: Sequence[Passage], answer: str, *,
           wording: str = "training") -> ChatExample:
    """Retrieval-augmented QA (§4.2 part 3): gold passage and BM25 hard negatives, already shuffled.

    ``wording`` picks the prompt from :data:`RAG_QA_PROMPTS`: "training" is Appendix C.2 2) with
    Table 1's question ("Answer the following question from context. {question}").
    """
    return _example(component, prompt(RAG_QA_PROMPTS[wording]), question, passages, answer)


def context_ranking(component: str, question: str, passage: Passage, relevant: bool,
                    history: Sequence[dict[str, str]] = ()) -> ChatExample:
    """Context ranking (§4.2 part 4): one query-passage pair labelled "True" or "False"."""
    target = TRUE if relevant else FALSE
    return _example(component, prompt("rankrag.context_ranking"), question, [passage], target, history)


def rag_ranking(component: str, question: str, passages: Sequence[Passage], relevant: Sequence[bool]) -> ChatExample:
    """Retrieval-augmented ranking (§4.2 part 5): the ids of every relevant passage among five.

    The paper names the target "Passage Indexes" without printing its form; the ids are written as
    the prompt numbers the passages, comma-separated ("1, 4"), and "None" when no passage holds the
    answer.
    """
    ids = [str(number) for number, keep in enumerate(relevant, start=1) if keep]
    target = ", ".join(ids) if ids else "None"
    return _example(component, prompt("rankrag_train.rag_ranking"), question, passages, target)


def chat_sft(component: str, messages: Messages) -> ChatExample:
    """Stage-I SFT data kept in the blend (§4.2 part 1): a conversation ending with the assistant.
    A conversation without a system turn gets the paper's (Appendix C.1, the same text as C.2)."""
    question = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    turns = [dict(m) for m in messages]
    if turns[0]["role"] != "system":
        turns.insert(0, {"role": "system", "content": prompt("rankrag.context_ranking").system})
    return ChatExample(component, turns, question)


def plain_example(messages: Messages, context_chars: int = 0) -> tuple[str, str]:
    """A training conversation in the plain framing, as (prompt, completion): the prompt is every
    turn but the last in the text evaluation sends (:func:`winnow.prompts.plain_layout`, ending in
    "Assistant:"), the completion the target after one space ("Assistant: True", App. C)."""
    return plain_layout(messages[:-1], context_chars), f" {messages[-1]['content']}"


def render_plain(messages: Messages, context_chars: int = 0) -> str:
    """The paper's "System: … User: … Assistant: …" layout of a conversation, for stats samples:
    the text ``winnow train sft --framing plain`` trains on."""
    return "".join(plain_example(messages, context_chars))
