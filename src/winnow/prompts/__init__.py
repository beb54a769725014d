"""Prompts are data: templates in TOML files beside this module, rendered here.

A template has a system message, a per-passage context entry and a user instruction, with declared
placeholders (``{question}``, ``{passage}``, ``{number}``); a ``dialogue`` template (RankRAG's
conversational variants) also places the question's earlier turns. ``messages`` gives chat turns for
the model's own chat template; ``render_plain`` gives the paper's "System: … User: … Assistant:"
form, which the tests compare with the papers' appendices and which the ``plain`` framing sends as a
raw completion (:func:`PromptTemplate.render` picks by framing).

Two further shapes, chosen by a TOML entry's ``kind``: ``graded`` (one query and one document, with
the assistant's answer started for it: RRR Appendix A.2) and ``listwise`` (RankGPT's multi-turn
conversation, one user turn per passage: RRR Appendix A.3). Load them with :func:`graded_prompt` and
:func:`listwise_prompt`; :func:`prompt` keeps returning the passage templates. ``judge`` (MAIN-RAG's
Agent-2: a document, a question and an LLM's answer to judge) loads with :func:`judge_prompt`.
"""

from __future__ import annotations

import string
import tomllib
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib.resources import files
from typing import Sequence, TypeVar

from ..errors import WinnowError
from ..records import Passage, Turn

Messages = list[dict[str, str]]
#: How a prompt reaches the model: ``chat`` as chat turns through the model's own chat template,
#: ``plain`` as the text the paper prints ("System: … User: … Assistant:"), sent as a raw completion.
FRAMINGS = ("chat", "plain")

ALLOWED_FIELDS = {
    "system": set(),
    "passage": {"passage", "number"},
    "user": {"question"},
}


def _check_placeholders(name: str, template: object, allowed_fields: dict[str, set[str]]) -> None:
    for part, allowed in allowed_fields.items():
        used = {f for _, f, _, _ in string.Formatter().parse(getattr(template, part)) if f}
        if not used <= allowed:
            raise WinnowError(f"prompt {name!r}: field {part!r} uses unknown placeholders "
                              f"{sorted(used - allowed)}", f"allowed: {sorted(allowed) or 'none'}")


def render_turns(messages: Messages) -> str:
    """Chat turns in the appendix layout of RRR (A.2, A.3): ``role:`` on its own line, then the text."""
    return "\n".join(f"{m['role']}:\n{m['content']}" for m in messages)


def plain_layout(messages: Messages, context_chars: int = 0) -> str:
    """A chat prompt in the plain framing: RankRAG's "System: … User: … Assistant:" text (App. D for
    inference; App. C prints the training prompts the same way), ChatQA's layout.

    Every turn becomes one block "Role: text", blocks are separated by one blank line, and the text
    ends in "Assistant:" for the model to continue. The context, which the chat turns carry at the
    start of the first turn after the system's (``context_chars`` characters, then a blank line:
    :meth:`PromptTemplate.messages`), is a block of its own between "System:" and the turns, where
    the appendix prints it. Evaluation and training both render through this one function.
    """
    turns = [dict(m) for m in messages]
    first = 1 if turns and turns[0]["role"] == "system" else 0
    blocks = []
    if context_chars and len(turns) > first:
        text = turns[first]["content"]
        blocks.append(text[:context_chars])
        turns[first]["content"] = text[context_chars:].removeprefix("\n\n")
    blocks = [f"{t['role'].capitalize()}: {t['content']}" for t in turns[:first]] + blocks
    blocks += [f"{t['role'].capitalize()}: {t['content']}" for t in turns[first:]]
    return "\n\n".join([*blocks, "Assistant:"])


#: Where a passage's title goes: on a line of its own above the text (``line``), or before the text
#: on the same line (``inline``: "title text", RankRAG's case studies, Tables 10-11, where each
#: "Passage i:" block is one line).
TITLE_LAYOUTS = ("line", "inline")


def format_passage(passage: Passage, title: str = "line") -> str:
    """How a passage reads inside a prompt: its title, then its text (see :data:`TITLE_LAYOUTS`)."""
    if not passage.title:
        return passage.text
    return f"{passage.title} {passage.text}" if title == "inline" else f"{passage.title}\n{passage.text}"


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    source: str
    system: str
    passage: str
    user: str
    passage_separator: str = "\n\n"
    strip_question_end: bool = False
    #: A conversational template (RankRAG Appendix D, Doc2dial/Inscit/TopiOCQA): the question's
    #: earlier turns come between the context and the instruction. Other templates refuse them.
    dialogue: bool = False
    #: Where each passage's title goes (:data:`TITLE_LAYOUTS`).
    title: str = "line"

    def __post_init__(self) -> None:
        _check_placeholders(self.name, self, ALLOWED_FIELDS)
        if self.title not in TITLE_LAYOUTS:
            raise WinnowError(f"prompt {self.name!r}: unknown title layout {self.title!r}",
                              f"choose one of: {', '.join(TITLE_LAYOUTS)}")

    def _question(self, question: str) -> str:
        question = question.strip()
        return question.rstrip("?.! ") if self.strip_question_end else question

    def _history(self, history: Sequence[Turn]) -> Sequence[Turn]:
        if history and not self.dialogue:
            raise WinnowError(f"prompt {self.name!r} has no place for a dialogue history ({len(history)} turn(s))",
                              "set the task setting to 'conversational' for questions with earlier turns")
        return history

    def context(self, passages: Sequence[Passage]) -> str:
        return self.passage_separator.join(
            self.passage.format(passage=format_passage(p, self.title), number=i)
            for i, p in enumerate(passages, start=1))

    def messages(self, question: str, passages: Sequence[Passage], history: Sequence[Turn] = ()) -> Messages:
        """Chat turns: the system message, the earlier turns of a dialogue, then the instruction as
        the user's turn; the context opens the first user turn."""
        turns = [{"role": t.role, "content": t.text} for t in self._history(history)]
        turns.append({"role": "user", "content": self.user.format(question=self._question(question))})
        context = self.context(passages)
        if context:
            turns[0] = {**turns[0], "content": f"{context}\n\n{turns[0]['content']}"}
        return [{"role": "system", "content": self.system}, *turns]

    def render_plain(self, question: str, passages: Sequence[Passage], history: Sequence[Turn] = ()) -> str:
        """The paper's plain-text form of the prompt: blocks separated by a blank line, ending in
        "Assistant:" for the model to continue. It is :func:`plain_layout` of :meth:`messages`, the
        function ``winnow train sft --framing plain`` renders training examples with."""
        return plain_layout(self.messages(question, passages, history), len(self.context(passages)))

    def render(self, question: str, passages: Sequence[Passage], *, history: Sequence[Turn] = (),
               framing: str = "chat") -> Messages | str:
        """The prompt in ``framing``: chat turns, or the paper's plain text (see :data:`FRAMINGS`)."""
        if framing not in FRAMINGS:
            raise WinnowError(f"unknown framing {framing!r}", f"choose one of: {', '.join(FRAMINGS)}")
        if framing == "plain":
            return self.render_plain(question, passages, history)
        return self.messages(question, passages, history)


GRADED_FIELDS = {
    "system": set(),
    "user": {"query", "document"},
    "answer_prefix": set(),
}


@dataclass(frozen=True)
class GradedPromptTemplate:
    """One query and one document, answered with a grade (RRR Appendix A.2).

    ``answer_prefix`` is the start of the answer format ("<<Score>>"). Sent as a final assistant
    turn, chat templates that continue it (llama.cpp's server does: "prefill assistant") make the
    grade the very next token, so its probabilities are one forward pass away.
    """

    name: str
    source: str
    system: str
    user: str
    answer_prefix: str = ""

    def __post_init__(self) -> None:
        _check_placeholders(self.name, self, GRADED_FIELDS)

    def messages(self, query: str, passage: Passage, *, prefill: bool = True) -> Messages:
        turns = [{"role": "system", "content": self.system},
                 {"role": "user", "content": self.user.format(query=query.strip(),
                                                              document=format_passage(passage))}]
        if prefill and self.answer_prefix:
            turns.append({"role": "assistant", "content": self.answer_prefix})
        return turns

    def render_plain(self, query: str, passage: Passage) -> str:
        """The paper's layout of the prompt (without the prefilled answer)."""
        return render_turns(self.messages(query, passage, prefill=False))


LISTWISE_FIELDS = {
    "system": set(),
    "intro": {"num", "query"},
    "intro_reply": set(),
    "passage": {"number", "passage"},
    "passage_reply": {"number"},
    "instruction": {"num", "query"},
    "titled_passage": {"title", "text"},
}


def passage_words(passage: Passage, max_words: int | None) -> str:
    """A passage on one line, cut to ``max_words`` words, as RankGPT feeds it (300 words)."""
    return _first_words(format_passage(passage), max_words)


@lru_cache(maxsize=4096)
def _first_words(text: str, max_words: int | None) -> str:
    # Remembered: a listwise prompt is rendered several times while it is fitted, and sliding
    # windows show a passage in two windows (splitting was a tenth of RankGPT's client CPU).
    words = text.split()
    return " ".join(words if max_words is None else words[:max_words])


@dataclass(frozen=True)
class ListwisePromptTemplate:
    """RankGPT's permutation-generation conversation (Sun et al., 2023; RRR Appendix A.3).

    System message; the intro turn and its reply; per passage a user turn "[i] passage" and an
    assistant turn acknowledging it; then the instruction to answer with a ranking "[] > []".
    ``titled_passage`` is how a passage with a title reads ({title}, {text}); rank_gpt.py's
    "Title: … Content: …" for its own prompt. "" reads it as :func:`passage_words` does, "title text".
    A passage without a title is its text either way (rank_gpt.py drops the empty "Title: Content: ").
    """

    name: str
    source: str
    system: str
    intro: str
    intro_reply: str
    passage: str
    passage_reply: str
    instruction: str
    titled_passage: str = ""

    def __post_init__(self) -> None:
        _check_placeholders(self.name, self, LISTWISE_FIELDS)

    def messages(self, query: str, passages: Sequence[Passage], *, max_words: int | None = None) -> Messages:
        query, num = query.strip(), len(passages)
        turns = [{"role": "system", "content": self.system},
                 {"role": "user", "content": self.intro.format(num=num, query=query)},
                 {"role": "assistant", "content": self.intro_reply}]
        for number, p in enumerate(passages, start=1):
            turns.append({"role": "user",
                          "content": self.passage.format(number=number, passage=self.passage_text(p, max_words))})
            turns.append({"role": "assistant", "content": self.passage_reply.format(number=number)})
        turns.append({"role": "user", "content": self.instruction.format(num=num, query=query)})
        return turns

    def passage_text(self, passage: Passage, max_words: int | None = None) -> str:
        """One passage as its turn holds it: on one line, titled as the template says, then cut to
        ``max_words`` words (rank_gpt.py cuts after adding "Title:" and "Content:", which count)."""
        if self.titled_passage and passage.title:
            return _first_words(self.titled_passage.format(title=passage.title, text=passage.text), max_words)
        return passage_words(passage, max_words)

    def render_plain(self, query: str, passages: Sequence[Passage], *, max_words: int | None = None) -> str:
        return render_turns(self.messages(query, passages, max_words=max_words))


REWRITE_FIELDS = {
    "system": set(),
    "instruction": set(),
    "topic": {"query"},
    "query": {"number", "rewrite"},
    "results": set(),
    "result": {"number", "document"},
}


@dataclass(frozen=True)
class RewritePromptTemplate:
    """RRR's rewrite prompt (Appendix A.1): the instruction, the TOPIC (the original query), then
    for every earlier query its top results (Algorithm 1 line 12). A query given without documents
    is listed without a TOP RESULTS block. The answer is started with ``answer_prefix``
    ("<<Rewrite>>") so the next text is the rewrite itself."""

    name: str
    source: str
    system: str
    instruction: str
    topic: str
    query: str
    results: str
    result: str
    answer_prefix: str = ""

    def __post_init__(self) -> None:
        _check_placeholders(self.name, self, REWRITE_FIELDS)

    def messages(self, query: str, history: Sequence[tuple[str, Sequence[Passage]]], *,
                 max_words: int | None = None, prefill: bool = True) -> Messages:
        lines = [self.instruction, self.topic.format(query=query.strip())]
        for number, (rewrite, documents) in enumerate(history, start=1):
            lines.append(self.query.format(number=number, rewrite=rewrite))
            if not documents:
                # RRR without retrieval feedback (§5.2 (a), Table 5): the queries tried, no results.
                continue
            lines.append(self.results)
            lines.extend(self.result.format(number=i, document=passage_words(d, max_words))
                         for i, d in enumerate(documents, start=1))
        turns = [{"role": "system", "content": self.system}, {"role": "user", "content": "\n".join(lines)}]
        if prefill and self.answer_prefix:
            turns.append({"role": "assistant", "content": self.answer_prefix})
        return turns


JUDGE_FIELDS = {
    "system": set(),
    "user": {"document", "question", "answer"},
}


@dataclass(frozen=True)
class JudgePromptTemplate:
    """One (document, question, answer) triplet put to a judge: MAIN-RAG's Agent-2 (Chang et al.,
    ACL 2025, "Definition of LLM Agents in MAIN-RAG"; instruction in Appendix C). The answer is an
    earlier model's answer to the question from that document alone."""

    name: str
    source: str
    system: str
    user: str

    def __post_init__(self) -> None:
        _check_placeholders(self.name, self, JUDGE_FIELDS)

    def messages(self, question: str, passage: Passage, answer: str) -> Messages:
        user = self.user.format(document=format_passage(passage), question=question.strip(), answer=answer.strip())
        return [{"role": "system", "content": self.system}, {"role": "user", "content": user}]

    def render_plain(self, question: str, passage: Passage, answer: str) -> str:
        return render_turns(self.messages(question, passage, answer))


AnyTemplate = (PromptTemplate | GradedPromptTemplate | ListwisePromptTemplate | RewritePromptTemplate
               | JudgePromptTemplate)
TEMPLATE_KINDS: dict[str, type[AnyTemplate]] = {
    "passages": PromptTemplate,
    "graded": GradedPromptTemplate,
    "listwise": ListwisePromptTemplate,
    "rewrite": RewritePromptTemplate,
    "judge": JudgePromptTemplate,
}
T = TypeVar("T", PromptTemplate, GradedPromptTemplate, ListwisePromptTemplate, RewritePromptTemplate,
            JudgePromptTemplate)


@cache
def _load(family: str) -> dict[str, AnyTemplate]:
    resource = files(__package__) / f"{family}.toml"
    if not resource.is_file():
        raise WinnowError(f"no prompt family {family!r}", "see src/winnow/prompts/*.toml")
    data = tomllib.loads(resource.read_text(encoding="utf-8"))
    templates: dict[str, AnyTemplate] = {}
    for name, fields in data.items():
        fields = dict(fields)
        kind = fields.pop("kind", "passages")
        if kind not in TEMPLATE_KINDS:
            raise WinnowError(f"prompt {family}.{name}: unknown kind {kind!r}",
                              f"known kinds: {', '.join(TEMPLATE_KINDS)}")
        templates[name] = TEMPLATE_KINDS[kind](name=f"{family}.{name}", **fields)
    return templates


def _lookup(name: str, kind: type[T]) -> T:
    family, _, entry = name.partition(".")
    templates = _load(family)
    if entry not in templates:
        raise WinnowError(f"no prompt {name!r}", f"known in {family}: {sorted(templates)}")
    template = templates[entry]
    if not isinstance(template, kind):
        loaders = {PromptTemplate: "prompt", GradedPromptTemplate: "graded_prompt",
                   ListwisePromptTemplate: "listwise_prompt", RewritePromptTemplate: "rewrite_prompt",
                   JudgePromptTemplate: "judge_prompt"}
        raise WinnowError(f"prompt {name!r} is a {type(template).__name__}, not a {kind.__name__}",
                          f"load it with {loaders[type(template)]}({name!r})")
    return template


def prompt(name: str) -> PromptTemplate:
    """A template by ``family.name``, e.g. ``rankrag.context_ranking``."""
    return _lookup(name, PromptTemplate)


#: RankRAG's task types (§5.1) and the suffix naming each one's Appendix D prompt variants.
TASK_VARIANTS = {"qa": "", "fever": "_fever", "conversational": "_conversational"}


def task_prompt(name: str, task: str) -> PromptTemplate:
    """The variant of ``name`` (``rankrag.context_ranking`` or ``rankrag.rag``) for ``task``:
    ``rankrag.rag`` for ``qa``, ``rankrag.rag_fever`` for ``fever``, and so on."""
    if task not in TASK_VARIANTS:
        raise WinnowError(f"unknown task {task!r}", f"choose one of: {', '.join(TASK_VARIANTS)}")
    return prompt(name + TASK_VARIANTS[task])


def graded_prompt(name: str) -> GradedPromptTemplate:
    """A graded-relevance template by ``family.name``, e.g. ``rrr.relevance``."""
    return _lookup(name, GradedPromptTemplate)


def listwise_prompt(name: str) -> ListwisePromptTemplate:
    """A listwise (RankGPT) template by ``family.name``, e.g. ``rrr.listwise``."""
    return _lookup(name, ListwisePromptTemplate)


def rewrite_prompt(name: str) -> RewritePromptTemplate:
    """A query-rewrite template by ``family.name``, e.g. ``rrr.rewrite``."""
    return _lookup(name, RewritePromptTemplate)


def judge_prompt(name: str) -> JudgePromptTemplate:
    """A document-judge template by ``family.name``, e.g. ``mainrag.judge``."""
    return _lookup(name, JudgePromptTemplate)
