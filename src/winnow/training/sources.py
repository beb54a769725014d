"""Reading the user's data files for the blend, strictly: a bad or missing field stops the build
with the file, line and field at fault (training on silently altered data helps nobody).

Formats, one record per line (passages are a string or ``{"title", "text"}``; answers are
``"answers": [...]``, ``"answer": "..."`` or FlashRAG's ``"golden_answers": [...]``):

* ``context_qa``: JSONL ``{"question", answers, "passage", "history"?}``; ``history`` is the earlier
  turns of a conversation, ``[{"role": "user"|"assistant", "content"}, ...]``, starting with the user
  and ending with the assistant (conversational QA, §4.2 part 2 ii).
* ``rag_qa`` and ``rag_ranking``: JSONL ``{"question", answers, "gold", "retrieved": [...]}``: the gold
  passage and the top BM25 passages for the question (§4.2 parts 3 and 5).
* ``ranking``: MS MARCO-style triples, TSV ``query<TAB>relevant passage<TAB>irrelevant passage``
  (§4.2 part 4), or JSONL ``{"question", "passage", "relevant": true|false, "history"?}``.
* ``conv_ranking``: JSONL ``{"question", answers, "document", "history"?}``: a conversation's latest
  question, its answer and its one background document (§4.2 part 4, pseudo relevance).
* ``sft``: JSONL ``{"messages": [{"role", "content"}, ...]}`` ending with an assistant turn (§4.2 part 1),
  or one instruction and its response as §4.1's datasets publish them (:data:`INSTRUCTION_FORMATS`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..corpus.jsonl import json_type, read_json_lines, require_object
from ..corpus.lines import read_lines
from ..errors import InputError
from ..records import Passage

Turns = list[dict[str, str]]
ROLES = ("system", "user", "assistant")


@dataclass(frozen=True, slots=True)
class Where:
    """The file and line a record came from."""

    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True, slots=True)
class GoldQA:
    """A question with its gold passage and answers (context-rich QA; conversational QA with history)."""

    where: Where
    question: str
    answers: list[str]
    passage: Passage
    history: Turns = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RetrievedList:
    """A question, its gold passage and the passages a retriever ranked for it (best first)."""

    where: Where
    question: str
    answers: list[str]
    gold: Passage
    retrieved: list[Passage]
    regex: bool = False  # the answers are regular expressions (CuratedTREC style)


@dataclass(frozen=True, slots=True)
class RankingPair:
    where: Where
    question: str
    passage: Passage
    relevant: bool
    history: Turns = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ConvDocument:
    """A conversation's latest question, its answer and the one document it is grounded in."""

    where: Where
    question: str
    answers: list[str]
    document: str
    history: Turns = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Conversation:
    where: Where
    messages: Turns


HINTS = {
    "context_qa": '{"question": ..., "answers": [...], "passage": ..., "history": [...] (optional)}',
    "rag_qa": '{"question": ..., "answers": [...], "gold": passage, "retrieved": [passages]}',
    "ranking": 'query<TAB>relevant passage<TAB>irrelevant passage, or {"question", "passage", "relevant": bool}',
    "conv_ranking": '{"question": ..., "answers": [...], "document": "...", "history": [...] (optional)}',
    "sft": '{"messages": [{"role": "user", "content": ...}, ..., {"role": "assistant", "content": ...}]}, '
           'or {"instruction", "input"?, "output"}, {"instruction", "context"?, "response"}, {"inputs", "targets"}, '
           '{"prompt", "completion"}',
}
# Single-turn instruction data in the shapes the Stage-I datasets of RankRAG §4.1 are published in:
# (instruction, optional input appended after a blank line, response).
INSTRUCTION_FORMATS: tuple[tuple[str, str | None, str], ...] = (
    ("instruction", "input", "output"),  # Alpaca-style: Self-Instruct, Unnatural Instructions
    ("instruction", "context", "response"),  # Dolly
    ("inputs", None, "targets"),  # the FLAN collection
    ("prompt", None, "completion"),  # Self-Instruct's prompt/completion release
)
HINTS["rag_ranking"] = HINTS["rag_qa"]


def read_component_file(kind: str, path: Path, limit: int | None = None) -> list[Any]:
    """The records of ``path`` for a component of ``kind``, in file order (at most ``limit``)."""
    reader = {"context_qa": _gold_qa, "rag_qa": _retrieved_list, "rag_ranking": _retrieved_list,
              "ranking": _ranking, "conv_ranking": _conv_document, "sft": _conversation}[kind]
    if kind == "ranking" and not path.name.lower().endswith((".jsonl", ".jsonl.gz", ".json")):
        records: Iterator[Any] = _triples(path)
    else:
        records = (reader(require_object(record, path, line, hint=HINTS[kind]), Where(str(path), line))
                   for line, record in read_json_lines(path, hint=HINTS[kind]))
    out = []
    for record in records:
        out.append(record)
        if limit is not None and len(out) >= limit:
            break
    return out


class _Fields:
    """Field readers that name the file, line and field when a value is wrong."""

    def __init__(self, record: dict[str, Any], where: Where, kind: str) -> None:
        self.record, self.where, self.hint = record, where, HINTS[kind]

    def fail(self, name: str, message: str) -> InputError:
        return InputError(self.where.path, message, line=self.where.line, field=name, hint=self.hint)

    def text(self, name: str) -> str:
        value = self.record.get(name)
        if not isinstance(value, str) or not value.strip():
            got = "nothing" if name not in self.record else json_type(value)
            raise self.fail(name, f"must be a non-empty string, got {got}")
        return value.strip()

    def answers(self) -> list[str]:
        name = next((key for key in ("answers", "answer", "golden_answers") if key in self.record), "answers")
        value = self.record.get(name)
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not values or not all(isinstance(a, str) and a.strip() for a in values):
            raise self.fail(name, "answers must be a non-empty string or a non-empty list of non-empty strings")
        return [a.strip() for a in values]

    def passage(self, name: str, value: Any = None, suffix: str = "") -> Passage:
        value = self.record.get(name) if value is None else value
        label = f"{name}{suffix}"
        passage_id = f"{self.where}:{label}"
        if isinstance(value, str) and value.strip():
            return Passage(passage_id, value.strip())
        if isinstance(value, dict) and isinstance(value.get("text"), str) and value["text"].strip():
            title = value.get("title") or ""
            if not isinstance(title, str):
                raise self.fail(label, f"title must be a string, got {json_type(title)}")
            return Passage(str(value.get("id") or passage_id), value["text"].strip(), title.strip())
        got = "nothing" if value is None else json_type(value)
        raise self.fail(label, f'must be a non-empty string or {{"title", "text"}}, got {got}')

    def passages(self, name: str) -> list[Passage]:
        value = self.record.get(name)
        if not isinstance(value, list) or not value:
            raise self.fail(name, "must be a non-empty list of passages")
        return [self.passage(name, item, f"[{i}]") for i, item in enumerate(value)]

    def turns(self, name: str, *, required: bool, final: str, allow_system: bool = False) -> Turns:
        """Chat turns: a list of {role, content}; user and assistant alternate; the last is ``final``;
        a system turn may open ``messages`` (SFT data) but not a ``history`` (the blend adds its own)."""
        if name not in self.record and not required:
            return []
        value = self.record.get(name)
        if not isinstance(value, list) or not value:
            raise self.fail(name, "must be a non-empty list of {\"role\", \"content\"} turns")
        turns = []
        for i, turn in enumerate(value):
            if not isinstance(turn, dict) or turn.get("role") not in ROLES or not isinstance(turn.get("content"), str):
                raise self.fail(f"{name}[{i}]", f'must be {{"role": one of {list(ROLES)}, "content": "..."}}')
            turns.append({"role": turn["role"], "content": turn["content"]})
        roles = [t["role"] for t in turns if t["role"] != "system"]
        if any(t["role"] == "system" for t in turns[0 if not allow_system else 1:]):
            raise self.fail(name, "a system turn may only open messages" if allow_system
                            else "no system turn here: the blend adds the paper's system prompt")
        expected = ["user" if i % 2 == 0 else "assistant" for i in range(len(roles))]
        if roles != expected or not roles or roles[-1] != final:
            raise self.fail(name, f"turns must alternate user/assistant, starting with user and ending with {final}")
        return turns


def _gold_qa(record: dict[str, Any], where: Where) -> GoldQA:
    f = _Fields(record, where, "context_qa")
    history = f.turns("history", required=False, final="assistant")
    return GoldQA(where, f.text("question"), f.answers(), f.passage("passage"), history)


def _retrieved_list(record: dict[str, Any], where: Where) -> RetrievedList:
    f = _Fields(record, where, "rag_qa")
    return RetrievedList(where, f.text("question"), f.answers(), f.passage("gold"), f.passages("retrieved"))


def _ranking(record: dict[str, Any], where: Where) -> RankingPair:
    f = _Fields(record, where, "ranking")
    relevant = record.get("relevant")
    if not isinstance(relevant, bool):
        got = json_type(relevant) if "relevant" in record else "nothing"
        raise f.fail("relevant", f"must be true or false, got {got}")
    return RankingPair(where, f.text("question"), f.passage("passage"), relevant,
                       f.turns("history", required=False, final="assistant"))


def _conv_document(record: dict[str, Any], where: Where) -> ConvDocument:
    f = _Fields(record, where, "conv_ranking")
    return ConvDocument(where, f.text("question"), f.answers(), f.text("document"),
                        f.turns("history", required=False, final="assistant"))


def _conversation(record: dict[str, Any], where: Where) -> Conversation:
    f = _Fields(record, where, "sft")
    if "messages" in record:
        return Conversation(where, f.turns("messages", required=True, final="assistant", allow_system=True))
    for instruction, extra, response in INSTRUCTION_FORMATS:
        if instruction in record and response in record:
            user = f.text(instruction)
            addition = record.get(extra, "") if extra else ""
            if not isinstance(addition, str):
                raise f.fail(str(extra), f"must be a string, got {json_type(addition)}")
            if addition.strip():
                user = f"{user}\n\n{addition.strip()}"
            return Conversation(where, [{"role": "user", "content": user},
                                        {"role": "assistant", "content": f.text(response)}])
    raise f.fail("messages", "no conversation: give messages, or an instruction and its response")


def _triples(path: Path) -> Iterator[RankingPair]:
    """MS MARCO training triples: each line gives a relevant and an irrelevant pair (§4.2 part 4)."""
    for line, text in read_lines(path):
        if not text.strip():
            continue
        parts = text.rstrip("\r\n").split("\t")
        if len(parts) != 3 or not all(p.strip() for p in parts):
            raise InputError(path, f"expected 3 non-empty tab-separated fields, got {len(parts)}", line=line,
                             hint=HINTS["ranking"])
        where = Where(str(path), line)
        query, relevant, irrelevant = (p.strip() for p in parts)
        yield RankingPair(where, query, Passage(f"{where}:relevant", relevant), True)
        yield RankingPair(where, query, Passage(f"{where}:irrelevant", irrelevant), False)
