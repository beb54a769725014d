"""The papers' benchmark files as users download them, read into Winnow's QA records.

``load_dataset("LAYOUT:PATH")`` (``winnow data export LAYOUT:PATH``) reads one file:

* ``kilt:`` a KILT JSONL file (Petroni et al. 2021; NQ, TriviaQA, HotpotQA, FEVER …): one
  ``{"id", "input", "output": [{"answer", "provenance"}, …]}`` per line. The question is ``input``, the
  gold answers every distinct ``answer`` (a test file has none). FEVER's labels SUPPORTS / REFUTES
  become "True" / "False", the answers RankRAG's D.2 FEVER prompt asks for (RankRAG Table 2);
  its accuracy is then read from the label an answer states (:func:`winnow.answers.stated_label`).
* ``asqa:`` ASQA (Stelmakh et al. 2022): the dataset's ``ASQA.json`` (``{"train": {id: …}, "dev": …}``;
  ``asqa:ASQA.json#train`` picks the split, dev by default) or ALCE's list (``asqa_eval_*.json``).
  Each sub-question's short answers go to ``metadata.qa_pairs`` (for str-em) and the annotators' long
  answers to ``metadata.long_answers`` (for ROUGE-L); the gold answers are all short answers.
* ``arc:`` ARC-Challenge (Clark et al. 2018; MAIN-RAG Table 1): AI2's JSONL
  (``{"question": {"stem", "choices": [{"text", "label"}]}, "answerKey"}``) or the same records with
  ``"question"`` a string and ``"choices": {"text": […], "label": […]}``.
* ``mirage:`` MIRAGE's ``benchmark.json`` (Xiong et al. 2024; RankRAG Table 5):
  ``{set: {id: {"question", "options": {"A": …}, "answer": "A"}}}``; ``mirage:benchmark.json#medqa``
  reads one of its five sets, no suffix all of them.
* ``popqa:`` / ``popqa-longtail:`` PopQA (Mallen et al. 2023): its TSV (or JSONL with the same
  fields). The long tail is the questions whose subject has fewer than 100 monthly Wikipedia page
  views (``s_pop < 100``: 1,399 of 14,267), the subset Self-RAG and RankRAG report.
* ``2wiki:`` 2WikiMultihopQA (Ho et al. 2020; RankRAG Tables 2-4): the dataset's ``dev.json`` (a
  list of ``{"_id", "type", "question", "answer", "supporting_facts", ...}``; Hugging Face's copy names
  the id ``id``). The gold answer is ``answer``; the question's type (comparison, inference,
  compositional, bridge_comparison) and the titles of its supporting facts go to the metadata.
* ``topiocqa:`` / ``inscit:`` / ``doc2dial:`` RankRAG's conversational QA sets, each question with
  its dialogue's earlier turns as ``history`` (:mod:`.dialogues`).

A multiple-choice question (ARC, MIRAGE) keeps its options in ``metadata.choices`` (letter → text)
and its gold answer is the letter; the question text the method sees is the question followed by
one "A. option" line per option, since the reader must see the options to choose among them.
Reading is strict, as for QA JSONL: a malformed record is an :class:`InputError` naming the file,
line (or key) and field.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..answers import CHOICES, LONG_ANSWERS, QA_PAIRS
from ..corpus.jsonl import json_type, read_json_lines, require_object
from ..errors import InputError, WinnowError
from .dataset import QA, Dataset
from .dialogues import DIALOGUE_HINTS, DIALOGUE_READERS
from .qa import QAItem

POPQA_LONG_TAIL = 100  # s_pop below this is the long tail (Mallen et al. 2023; Self-RAG §4.1)
FEVER_LABELS = {"SUPPORTS": "True", "REFUTES": "False"}
MIRAGE_SETS = ("mmlu", "medqa", "medmcqa", "pubmedqa", "bioasq")

KILT_HINT = 'each line must be {"id": ..., "input": "...", "output": [{"answer": "..."}, ...]} (KILT)'
ARC_HINT = 'each line must be {"id": ..., "question": {"stem": ..., "choices": [...]}, "answerKey": ...} (ARC)'
ASQA_HINT = ('ASQA.json ({"dev": {id: {"ambiguous_question", "qa_pairs", "annotations"}}}) or ALCE\'s list of '
             '{"question", "qa_pairs", "annotations"}')
MIRAGE_HINT = 'MIRAGE\'s benchmark.json: {"medqa": {id: {"question", "options": {"A": ...}, "answer": "A"}}, ...}'
TWOWIKI_HINT = '2WikiMultihopQA\'s dev.json: a list of {"_id", "type", "question", "answer", "supporting_facts"}'
POPQA_HINT = "PopQA's TSV (or JSONL) with the fields id, question, possible_answers and s_pop"


def _text(value: Any, path: Path, where: str, field: str, hint: str, *, line: int | None = None) -> str:
    if not isinstance(value, str) or not value.strip():
        got = "nothing" if value is None else json_type(value)
        raise InputError(path, f"{where}: {field} must be a non-empty string, got {got}", line=line, field=field,
                         hint=hint)
    return value.strip()


def _distinct(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(v.strip() for v in values if v.strip()))


def with_options(question: str, choices: Mapping[str, str]) -> str:
    """The question as the reader sees it: the question, then one "A. option" line per option."""
    return "\n".join([question, *(f"{letter}. {text}" for letter, text in choices.items())])


# --- KILT ---------------------------------------------------------------------------------------------

def read_kilt(path: Path, name: str) -> list[QAItem]:
    items = []
    for line, record in read_json_lines(path, hint=KILT_HINT):
        record = require_object(record, path, line, hint=KILT_HINT)
        if "id" not in record:
            raise InputError(path, "missing id", line=line, field="id", hint=KILT_HINT)
        question = _text(record.get("input"), path, "a KILT record", "input", KILT_HINT, line=line)
        outputs = record.get("output") or []
        if not isinstance(outputs, list):
            raise InputError(path, f"output must be a list, got {json_type(outputs)}", line=line, field="output",
                             hint=KILT_HINT)
        answers = _distinct(o["answer"] for o in outputs if isinstance(o, dict) and isinstance(o.get("answer"), str))
        if answers and all(a in FEVER_LABELS for a in answers):
            answers = [FEVER_LABELS[a] for a in answers]
        pages = _distinct(str(p.get("wikipedia_id", "")) for o in outputs if isinstance(o, dict)
                          for p in (o.get("provenance") or []) if isinstance(p, dict))
        metadata: dict[str, Any] = {"dataset": name, **({"provenance": pages} if pages else {})}
        items.append(QAItem(str(record["id"]), question, answers, metadata))
    return items


# --- 2WikiMultihopQA ---------------------------------------------------------------------------------

def read_2wiki(path: Path, name: str) -> list[QAItem]:
    data = _load_json(path, TWOWIKI_HINT)
    if not isinstance(data, list):
        raise InputError(path, f"expected a JSON list of questions, got {json_type(data)}", hint=TWOWIKI_HINT)
    items = []
    for number, record in enumerate(data, start=1):
        where = f"question {number}"
        if not isinstance(record, dict):
            raise InputError(path, f"{where}: expected an object, got {json_type(record)}", hint=TWOWIKI_HINT)
        qid = record.get("_id", record.get("id"))
        if not isinstance(qid, (str, int)) or isinstance(qid, bool) or not str(qid).strip():
            raise InputError(path, f"{where}: missing _id", field="_id", hint=TWOWIKI_HINT)
        question = _text(record.get("question"), path, where, "question", TWOWIKI_HINT)
        answer = _text(record.get("answer"), path, where, "answer", TWOWIKI_HINT)
        facts = record.get("supporting_facts") or []
        titles = _distinct(str(fact[0]) for fact in facts if isinstance(fact, (list, tuple)) and fact) \
            if isinstance(facts, list) else []
        metadata: dict[str, Any] = {"dataset": name, **({"type": record["type"]} if isinstance(record.get("type"), str)
                                                          else {}), **({"supporting_titles": titles} if titles else {})}
        items.append(QAItem(str(qid), question, [answer], metadata))
    return items


# --- ASQA ---------------------------------------------------------------------------------------------

def _load_json(path: Path, hint: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(path, f"not a JSON file: {exc}", hint=hint) from exc


def read_asqa(path: Path, name: str, split: str) -> list[QAItem]:
    data = _load_json(path, ASQA_HINT)
    if isinstance(data, dict):  # the dataset's own file: splits of {sample_id: record}
        if split not in data or not isinstance(data[split], dict):
            raise InputError(path, f"no split {split!r}", hint=f"splits here: {', '.join(map(str, data))}; "
                                                               f"give one as asqa:{path}#SPLIT")
        records = [(str(key), record) for key, record in data[split].items()]
    elif isinstance(data, list):  # ALCE's evaluation file
        records = [(f"[{i}]", record) for i, record in enumerate(data)]
    else:
        raise InputError(path, f"expected an object of splits or a list, got {json_type(data)}", hint=ASQA_HINT)
    items = []
    for where, record in records:
        if not isinstance(record, dict):
            raise InputError(path, f"{where}: expected an object, got {json_type(record)}", hint=ASQA_HINT)
        question = _text(record.get("ambiguous_question", record.get("question")), path, where, "ambiguous_question",
                         ASQA_HINT)
        pairs = record.get("qa_pairs")
        if not isinstance(pairs, list) or not pairs:
            raise InputError(path, f"{where}: qa_pairs must be a non-empty list", field="qa_pairs", hint=ASQA_HINT)
        groups = []
        for i, pair in enumerate(pairs):
            shorts = pair.get("short_answers") if isinstance(pair, dict) else None
            if not isinstance(shorts, list) or not all(isinstance(s, str) for s in shorts):
                raise InputError(path, f"{where}: qa_pairs[{i}].short_answers must be a list of strings",
                                 field="short_answers", hint=ASQA_HINT)
            groups.append(_distinct(shorts))
        longs = _distinct(a["long_answer"] for a in record.get("annotations") or []
                          if isinstance(a, dict) and isinstance(a.get("long_answer"), str))
        item_id = str(record.get("sample_id", where))
        metadata = {"dataset": name, QA_PAIRS: groups, **({LONG_ANSWERS: longs} if longs else {})}
        items.append(QAItem(item_id, question, _distinct(a for group in groups for a in group), metadata))
    return items


# --- multiple choice: ARC-Challenge and MIRAGE --------------------------------------------------------

def _arc_choices(record: dict[str, Any], path: Path, line: int) -> tuple[str, dict[str, str]]:
    question = record.get("question")
    choices: Any = record.get("choices")
    if isinstance(question, dict):  # AI2's layout: the stem and its choices together
        choices = question.get("choices")
        question = question.get("stem")
    stem = _text(question, path, "an ARC record", "question", ARC_HINT, line=line)
    if isinstance(choices, dict):  # the column layout: {"text": [...], "label": [...]}
        texts, labels = choices.get("text"), choices.get("label")
        if not (isinstance(texts, list) and isinstance(labels, list) and len(texts) == len(labels)):
            raise InputError(path, "choices.text and choices.label must be lists of one length", line=line,
                             field="choices", hint=ARC_HINT)
        choices = [{"text": t, "label": lb} for t, lb in zip(texts, labels, strict=True)]
    if not isinstance(choices, list) or len(choices) < 2:
        raise InputError(path, "a question needs at least two choices", line=line, field="choices", hint=ARC_HINT)
    options: dict[str, str] = {}
    for choice in choices:
        label = choice.get("label") if isinstance(choice, dict) else None
        text = choice.get("text") if isinstance(choice, dict) else None
        if not isinstance(label, str) or not label.strip() or not isinstance(text, str):
            raise InputError(path, f"each choice needs a label and a text, got {json.dumps(choice)[:80]}", line=line,
                             field="choices", hint=ARC_HINT)
        options[label.strip()] = text.strip()
    return stem, options


def read_arc(path: Path, name: str) -> list[QAItem]:
    items = []
    for line, record in read_json_lines(path, hint=ARC_HINT):
        record = require_object(record, path, line, hint=ARC_HINT)
        if "id" not in record:
            raise InputError(path, "missing id", line=line, field="id", hint=ARC_HINT)
        stem, options = _arc_choices(record, path, line)
        key = _text(record.get("answerKey"), path, "an ARC record", "answerKey", ARC_HINT, line=line)
        if key not in options:
            raise InputError(path, f"answerKey {key!r} is not one of the choices {', '.join(options)}", line=line,
                             field="answerKey", hint=ARC_HINT)
        items.append(QAItem(str(record["id"]), with_options(stem, options), [key],
                            {"dataset": name, CHOICES: options}))
    return items


def read_mirage(path: Path, name: str, subset: str) -> list[QAItem]:
    data = _load_json(path, MIRAGE_HINT)
    if not isinstance(data, dict):
        raise InputError(path, f"expected an object of sets, got {json_type(data)}", hint=MIRAGE_HINT)
    sets = [subset] if subset else [s for s in MIRAGE_SETS if s in data] or list(data)
    items = []
    for set_name in sets:
        questions = data.get(set_name)
        if not isinstance(questions, dict):
            raise InputError(path, f"no set {set_name!r}", hint=f"sets here: {', '.join(map(str, data))}")
        for key, record in questions.items():
            where = f"{set_name}.{key}"
            if not isinstance(record, dict):
                raise InputError(path, f"{where}: expected an object, got {json_type(record)}", hint=MIRAGE_HINT)
            question = _text(record.get("question"), path, where, "question", MIRAGE_HINT)
            options = record.get("options")
            if not isinstance(options, dict) or len(options) < 2 or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in options.items()):
                raise InputError(path, f"{where}: options must map at least two letters to texts", field="options",
                                 hint=MIRAGE_HINT)
            answer = record.get("answer")
            if answer not in options:
                raise InputError(path, f"{where}: answer {answer!r} is not one of the options", field="answer",
                                 hint=MIRAGE_HINT)
            options = {k: v.strip() for k, v in options.items()}
            items.append(QAItem(f"{set_name}-{key}", with_options(question, options), [str(answer)],
                                {"dataset": f"{name}/{set_name}", CHOICES: options}))
    return items


# --- PopQA --------------------------------------------------------------------------------------------

def _popqa_records(path: Path) -> Iterable[tuple[int, dict[str, Any]]]:
    if path.suffix in (".jsonl", ".json"):
        for line, record in read_json_lines(path, hint=POPQA_HINT):
            yield line, require_object(record, path, line, hint=POPQA_HINT)
        return
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle, delimiter="\t")
        missing = {"id", "question", "possible_answers", "s_pop"} - set(reader.fieldnames or ())
        if missing:
            raise InputError(path, f"the header lacks {', '.join(sorted(missing))}", line=1, hint=POPQA_HINT)
        for row in reader:
            yield reader.line_num, row


def read_popqa(path: Path, name: str, *, long_tail: bool) -> tuple[list[QAItem], int]:
    """The questions (the long tail only with ``long_tail``) and how many the file holds."""
    items, total = [], 0
    for line, record in _popqa_records(path):
        total += 1
        question = _text(record.get("question"), path, "a PopQA record", "question", POPQA_HINT, line=line)
        answers = record.get("possible_answers")
        if isinstance(answers, str):
            try:
                answers = json.loads(answers)
            except json.JSONDecodeError as exc:
                raise InputError(path, f"possible_answers is not a JSON list: {exc}", line=line,
                                 field="possible_answers", hint=POPQA_HINT) from exc
        if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
            raise InputError(path, "possible_answers must be a list of strings", line=line, field="possible_answers",
                             hint=POPQA_HINT)
        try:
            popularity = int(record.get("s_pop"))  # type: ignore[arg-type]
        except (TypeError, ValueError) as exc:
            raise InputError(path, f"s_pop must be a count, got {record.get('s_pop')!r}", line=line, field="s_pop",
                             hint=POPQA_HINT) from exc
        if long_tail and popularity >= POPQA_LONG_TAIL:
            continue
        items.append(QAItem(str(record.get("id", line)), question, _distinct(answers),
                            {"dataset": name, "s_pop": popularity}))
    return items, total


# --- LAYOUT:PATH --------------------------------------------------------------------------------------

LAYOUTS = ("kilt", "asqa", "arc", "mirage", "popqa", "popqa-longtail", "2wiki", *DIALOGUE_READERS)


def is_benchmark_file(name: str) -> bool:
    """``name`` is ``LAYOUT:PATH`` for one of :data:`LAYOUTS`."""
    return name.split(":", 1)[0] in LAYOUTS and ":" in name


def load_benchmark_file(name: str) -> Dataset:
    """The questions of ``LAYOUT:PATH[#PART]`` (see the module notes); PART is ASQA's split or
    MIRAGE's set."""
    layout, _, rest = name.partition(":")
    location, _, part = rest.partition("#")
    path = Path(location).expanduser()
    if not path.is_file():
        raise WinnowError(f"{path}: no such file", f"{layout}: takes the path of a downloaded {layout} file")
    stem = path.name.split(".")[0]
    source = f"{layout} file {path}"
    readers: dict[str, Callable[[], list[QAItem]]] = {
        "kilt": lambda: read_kilt(path, stem),
        "asqa": lambda: read_asqa(path, "asqa", part or "dev"),
        "arc": lambda: read_arc(path, stem),
        "mirage": lambda: read_mirage(path, "mirage", part),
        "2wiki": lambda: read_2wiki(path, "2wikimultihopqa"),
    }
    if layout in readers:
        questions = readers[layout]()
    elif layout in DIALOGUE_READERS:
        read = DIALOGUE_READERS[layout](path, _load_json(path, DIALOGUE_HINTS[layout]), layout)
        questions = read.questions
        if read.counts:
            source += f": {len(questions):,} questions; {read.describe()}"
    else:
        long_tail = layout == "popqa-longtail"
        questions, total = read_popqa(path, "popqa-longtail" if long_tail else "popqa", long_tail=long_tail)
        if long_tail:
            source += (f": the long tail, s_pop < {POPQA_LONG_TAIL} ({len(questions):,} of {total:,} questions; "
                       f"{total - len(questions):,} more popular ones left out)")
    if not questions:
        raise WinnowError(f"{path} holds no questions", f"is it a {layout} file? {source}")
    dataset_name = f"{layout}:{path.name}" + (f"#{part}" if part else "")
    return Dataset(dataset_name, QA, questions, None, source, "see the dataset's own terms")
