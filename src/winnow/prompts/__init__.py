"""Prompts are data: templates in TOML files beside this module, rendered here.

A template has a system message, a per-passage context entry and a user instruction, with declared
placeholders (``{question}``, ``{passage}``, ``{number}``). ``messages`` gives chat turns for the
model's own chat template; ``render_plain`` gives the paper's "System: … User: … Assistant:" form,
which the tests compare with the papers' appendices.
"""

from __future__ import annotations

import string
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Sequence

from ..errors import WinnowError
from ..records import Passage

Messages = list[dict[str, str]]

ALLOWED_FIELDS = {
    "system": set(),
    "passage": {"passage", "number"},
    "user": {"question"},
}


def format_passage(passage: Passage) -> str:
    """How a passage reads inside a prompt: its title on the first line, then its text."""
    return f"{passage.title}\n{passage.text}" if passage.title else passage.text


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    source: str
    system: str
    passage: str
    user: str
    passage_separator: str = "\n\n"
    strip_question_end: bool = False

    def __post_init__(self) -> None:
        for part, allowed in ALLOWED_FIELDS.items():
            used = {f for _, f, _, _ in string.Formatter().parse(getattr(self, part)) if f}
            if not used <= allowed:
                raise WinnowError(f"prompt {self.name!r}: field {part!r} uses unknown placeholders "
                                  f"{sorted(used - allowed)}", f"allowed: {sorted(allowed) or 'none'}")

    def _question(self, question: str) -> str:
        question = question.strip()
        return question.rstrip("?.! ") if self.strip_question_end else question

    def context(self, passages: Sequence[Passage]) -> str:
        return self.passage_separator.join(
            self.passage.format(passage=format_passage(p), number=i) for i, p in enumerate(passages, start=1))

    def messages(self, question: str, passages: Sequence[Passage]) -> Messages:
        """Chat turns: the system message, then the context and instruction as the user's turn."""
        user = self.user.format(question=self._question(question))
        context = self.context(passages)
        content = f"{context}\n\n{user}" if context else user
        return [{"role": "system", "content": self.system}, {"role": "user", "content": content}]

    def render_plain(self, question: str, passages: Sequence[Passage]) -> str:
        """The paper's plain-text form of the prompt."""
        user = self.user.format(question=self._question(question))
        return f"System: {self.system}\n\n{self.context(passages)}\n\nUser: {user}\n\nAssistant:"


@cache
def _load(family: str) -> dict[str, PromptTemplate]:
    resource = files(__package__) / f"{family}.toml"
    if not resource.is_file():
        raise WinnowError(f"no prompt family {family!r}", "see src/winnow/prompts/*.toml")
    data = tomllib.loads(resource.read_text(encoding="utf-8"))
    return {name: PromptTemplate(name=f"{family}.{name}", **fields) for name, fields in data.items()}


def prompt(name: str) -> PromptTemplate:
    """A template by ``family.name``, e.g. ``rankrag.context_ranking``."""
    family, _, entry = name.partition(".")
    templates = _load(family)
    if entry not in templates:
        raise WinnowError(f"no prompt {name!r}", f"known in {family}: {sorted(templates)}")
    return templates[entry]
