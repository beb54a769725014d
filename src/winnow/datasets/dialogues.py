"""RankRAG's conversational benchmarks as users download them (Table 2, App. D), one question per
answered user turn, with the turns before it as the question's ``history``.

* ``topiocqa:`` TopiOCQA (Adlakha et al. 2022): the dataset's JSON list of turns
  ``{"Conversation_no", "Turn_no", "Question", "Answer", "Context": [q1, a1, q2, a2, …],
  "Gold_passage": {"title", …}, "Additional_answers": [{"Answer"}, …]}``. ``Context`` alternates the
  earlier questions and answers; the gold answers are ``Answer`` and every additional answer
  (dev only).
* ``inscit:`` INSCIT (Wu et al. 2023): the repository's ``train.json`` / ``dev.json``,
  ``{conversation: {"turns": [{"context": [user, agent, …, user], "labels": [{"responseType",
  "response", "evidence"}]}]}}``. ``context`` ends with the question; each label's ``response`` is a
  gold answer (one or two annotators).
* ``doc2dial:`` Doc2Dial (Feng et al. 2020): ``doc2dial_dial_{train,validation}.json``,
  ``{"dial_data": {domain: {doc_id: [{"dial_id", "turns": [{"turn_id", "role": "user"|"agent",
  "utterance", …}]}]}}}`` (MultiDoc2Dial's files, with a list of dialogues per domain, read the same).
  Every user turn the agent answers is a question, the agent's next turn its answer.

A dialogue's turns are Winnow's alternating user/assistant turns (:func:`winnow.records.dialogue_history`).
Doc2Dial has runs of turns by one speaker ("user", "user"): a run is one turn, its utterances joined
by a space, and counted. What cannot be a question is left out and counted (an INSCIT turn without
labels, a Doc2Dial user turn nobody answers); a malformed record is an :class:`InputError` naming
the file, the record (conversation and turn) and the field.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..corpus.jsonl import json_type
from ..errors import InputError
from ..records import ROLES, dialogue_history
from .qa import QAItem

TOPIOCQA_HINT = ('TopiOCQA\'s JSON list of {"Conversation_no", "Turn_no", "Question", "Answer", "Context": '
                 '[question, answer, ...], "Gold_passage"}')
INSCIT_HINT = ('INSCIT\'s {conversation: {"turns": [{"context": [user, agent, ..., user], "labels": '
               '[{"response", "evidence"}]}]}}')
DOC2DIAL_HINT = ('Doc2Dial\'s {"dial_data": {domain: {doc_id: [{"dial_id", "turns": [{"role": "user"|"agent", '
                 '"utterance"}]}]}}}')
SPEAKERS = {"user": "user", "agent": "assistant"}  # Doc2Dial's roles as Winnow's

NO_LABELS = "turns without an annotated response"
UNANSWERED = "user turns no agent turn answers"
MERGED = "runs of turns by one speaker joined into one turn"
AGENT_FIRST = "agent turns before the user's first"


@dataclass
class DialogueRead:
    """The questions of a conversational file and what was left out or joined, by reason."""

    questions: list[QAItem] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)

    def describe(self) -> str:
        return "; ".join(f"{count:,} {reason}" for reason, count in self.counts.items() if count)


def _text(value: Any, path: Path, where: str, name: str, hint: str) -> str:
    if not isinstance(value, str) or not value.strip():
        got = "nothing" if value is None else json_type(value)
        raise InputError(path, f"{where}: {name} must be a non-empty string, got {got}", field=name, hint=hint)
    return value.strip()


def _history(texts: Sequence[str], path: Path, where: str, name: str, hint: str) -> Any:
    """Earlier turns given as alternating texts, user first, as Winnow's checked history."""
    turns = [{"role": ROLES[i % 2], "text": text} for i, text in enumerate(texts)]
    try:
        return dialogue_history(turns)
    except ValueError as exc:
        raise InputError(path, f"{where}: {name}: {exc}", field=name, hint=hint) from exc


def read_topiocqa(path: Path, data: Any, name: str) -> DialogueRead:
    if not isinstance(data, list):
        raise InputError(path, f"expected a list of turns, got {json_type(data)}", hint=TOPIOCQA_HINT)
    out = DialogueRead()
    for i, record in enumerate(data):
        if not isinstance(record, dict):
            raise InputError(path, f"[{i}]: expected an object, got {json_type(record)}", hint=TOPIOCQA_HINT)
        conversation, turn = record.get("Conversation_no"), record.get("Turn_no")
        if conversation is None or turn is None:
            missing = "Conversation_no" if conversation is None else "Turn_no"
            raise InputError(path, f"[{i}]: missing {missing}", field=missing, hint=TOPIOCQA_HINT)
        where = f"[{i}] (conversation {conversation}, turn {turn})"
        question = _text(record.get("Question"), path, where, "Question", TOPIOCQA_HINT)
        answers = [_text(record.get("Answer"), path, where, "Answer", TOPIOCQA_HINT)]
        extra = record.get("Additional_answers") or []
        if isinstance(extra, dict):  # the Hugging Face copy: {"Answer": [...], ...}
            extra = [{"Answer": a} for a in extra.get("Answer") or []]
        if not isinstance(extra, list):
            raise InputError(path, f"{where}: Additional_answers must be a list, got {json_type(extra)}",
                             field="Additional_answers", hint=TOPIOCQA_HINT)
        answers += [a["Answer"].strip() for a in extra if isinstance(a, dict) and isinstance(a.get("Answer"), str)
                    and a["Answer"].strip()]
        context = record.get("Context") or []
        if not isinstance(context, list) or not all(isinstance(t, str) for t in context):
            raise InputError(path, f"{where}: Context must be a list of strings (the earlier questions and answers)",
                             field="Context", hint=TOPIOCQA_HINT)
        history = _history(context, path, where, "Context", TOPIOCQA_HINT)
        gold = record.get("Gold_passage")
        metadata: dict[str, Any] = {"dataset": name, "conversation": conversation, "turn": turn}
        if isinstance(gold, dict) and isinstance(gold.get("title"), str):
            metadata["gold_title"] = gold["title"]
        out.questions.append(QAItem(f"{conversation}_{turn}", question, list(dict.fromkeys(answers)), metadata,
                                    history))
    return out


def read_inscit(path: Path, data: Any, name: str) -> DialogueRead:
    if not isinstance(data, dict):
        raise InputError(path, f"expected an object of conversations, got {json_type(data)}", hint=INSCIT_HINT)
    out = DialogueRead()
    for conversation, record in data.items():
        turns = record.get("turns") if isinstance(record, dict) else None
        if not isinstance(turns, list):
            raise InputError(path, f"conversation {conversation!r}: turns must be a list", field="turns",
                             hint=INSCIT_HINT)
        for number, turn in enumerate(turns, start=1):
            where = f"conversation {conversation!r}, turn {number}"
            context = turn.get("context") if isinstance(turn, dict) else None
            if not isinstance(context, list) or not context or not all(isinstance(t, str) for t in context):
                raise InputError(path, f"{where}: context must be a non-empty list of utterances ending with the "
                                       "question", field="context", hint=INSCIT_HINT)
            labels = turn.get("labels") or []
            if not isinstance(labels, list):
                raise InputError(path, f"{where}: labels must be a list, got {json_type(labels)}", field="labels",
                                 hint=INSCIT_HINT)
            answers = [_text(label.get("response") if isinstance(label, dict) else None, path, f"{where}, label {j}",
                             "response", INSCIT_HINT) for j, label in enumerate(labels)]
            if not answers:
                out.counts[NO_LABELS] += 1
                continue
            question = _text(context[-1], path, where, "context", INSCIT_HINT)
            history = _history(context[:-1], path, where, "context", INSCIT_HINT)
            out.questions.append(QAItem(f"{conversation}_{number}", question, list(dict.fromkeys(answers)),
                                        {"dataset": name, "conversation": conversation, "turn": number}, history))
    return out


def _dialogues(path: Path, data: Any) -> list[tuple[str, str, Any]]:
    """(domain, doc_id, dialogue) for every dialogue of a Doc2Dial (or MultiDoc2Dial) file."""
    dial_data = data.get("dial_data") if isinstance(data, dict) else None
    if not isinstance(dial_data, dict):
        raise InputError(path, "no dial_data object", field="dial_data", hint=DOC2DIAL_HINT)
    found = []
    for domain, documents in dial_data.items():
        if isinstance(documents, list):  # MultiDoc2Dial: the dialogues of a domain
            found += [(domain, "", dialogue) for dialogue in documents]
        elif isinstance(documents, dict):
            for doc_id, dialogues in documents.items():
                if not isinstance(dialogues, list):
                    raise InputError(path, f"dial_data.{domain}.{doc_id} must be a list of dialogues, got "
                                           f"{json_type(dialogues)}", field=f"dial_data.{domain}", hint=DOC2DIAL_HINT)
                found += [(domain, doc_id, dialogue) for dialogue in dialogues]
        else:
            raise InputError(path, f"dial_data.{domain} must be an object of documents, got {json_type(documents)}",
                             field=f"dial_data.{domain}", hint=DOC2DIAL_HINT)
    return found


def _doc2dial_runs(path: Path, where: str, turns: Any, counts: Counter[str]) -> list[tuple[str, str, Any]]:
    """The dialogue as alternating (role, text, turn_id) turns, opening with the user."""
    if not isinstance(turns, list):
        raise InputError(path, f"{where}: turns must be a list", field="turns", hint=DOC2DIAL_HINT)
    runs: list[tuple[str, str, Any]] = []
    for i, turn in enumerate(turns):
        role = SPEAKERS.get(str(turn.get("role"))) if isinstance(turn, dict) else None
        if role is None:
            got = turn.get("role") if isinstance(turn, dict) else turn
            raise InputError(path, f"{where}, turns[{i}]: role must be \"user\" or \"agent\", got {got!r}",
                             field="role", hint=DOC2DIAL_HINT)
        text = _text(turn.get("utterance"), path, f"{where}, turns[{i}]", "utterance", DOC2DIAL_HINT)
        turn_id = turn.get("turn_id", i + 1)
        if not runs and role != "user":
            counts[AGENT_FIRST] += 1
        elif runs and runs[-1][0] == role:
            counts[MERGED] += 1
            runs[-1] = (role, f"{runs[-1][1]} {text}", turn_id if role == "user" else runs[-1][2])
        else:
            runs.append((role, text, turn_id))
    return runs


def read_doc2dial(path: Path, data: Any, name: str) -> DialogueRead:
    out = DialogueRead()
    for domain, doc_id, dialogue in _dialogues(path, data):
        if not isinstance(dialogue, dict):
            raise InputError(path, f"dial_data.{domain}: a dialogue must be an object, got {json_type(dialogue)}",
                             hint=DOC2DIAL_HINT)
        dial_id = dialogue.get("dial_id")
        if not isinstance(dial_id, str) or not dial_id:
            raise InputError(path, f"dial_data.{domain}: a dialogue without a dial_id", field="dial_id",
                             hint=DOC2DIAL_HINT)
        runs = _doc2dial_runs(path, f"dialogue {dial_id}", dialogue.get("turns"), out.counts)
        for position in range(0, len(runs), 2):  # runs alternate, the user's at even positions
            if position + 1 >= len(runs):
                out.counts[UNANSWERED] += 1
                continue
            _, question, turn_id = runs[position]
            history = _history([text for _, text, _ in runs[:position]], path, f"dialogue {dial_id}", "turns",
                               DOC2DIAL_HINT)
            metadata = {"dataset": name, "conversation": dial_id, "turn": turn_id, "domain": domain,
                        **({"doc_id": doc_id} if doc_id else {})}
            out.questions.append(QAItem(f"{dial_id}_{turn_id}", question, [runs[position + 1][1]], metadata,
                                        history))
    return out


DIALOGUE_READERS = {"topiocqa": read_topiocqa, "inscit": read_inscit, "doc2dial": read_doc2dial}
DIALOGUE_HINTS = {"topiocqa": TOPIOCQA_HINT, "inscit": INSCIT_HINT, "doc2dial": DOC2DIAL_HINT}
