"""Training lists mined from a QA set and a Winnow index (RankRAG §4.2 parts 3-5, on our data).

For each question, BM25 returns the top ``depth`` passages. The best-ranked passage that holds a
gold answer (DPR ``has_answer``, the same test as answer Recall@k) plays the gold context; the
others, in rank order, are the "top-retrieved contexts using BM25" that the paper combines with it,
some of them hard negatives. A question with no answer-holding passage in the top ``depth`` gives
no list, and is counted.

Only training splits may be mined: a test set's name (``*-test``, BEIR, TREC DL) or a QA file named
``test*`` is refused, and the blend's contamination check catches the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..answers import AnswerMatcher, compile_answer_regex, has_answer
from ..datasets import QAItem, load_dataset, read_qa_jsonl
from ..errors import WinnowError
from ..records import Passage
from .sources import RetrievedList, Where

if TYPE_CHECKING:
    from ..index.bm25 import BM25Index

NO_ANSWER_PASSAGE = "no passage holding an answer in the BM25 top {depth}"


def is_test_source(source: str) -> bool:
    """A QA source that holds evaluation questions by its name: never train on it."""
    name = source.lower()
    stem = Path(name).name
    return (name.endswith("-test") or name.startswith(("beir/", "dl19", "dl20")) or stem.startswith("test")
            or "test." in stem)


def load_training_questions(source: str, limit: int | None = None) -> list[QAItem]:
    """The questions of a dataset name (``nq-dev``) or QA JSONL file, refusing evaluation sets."""
    if is_test_source(source):
        raise WinnowError(f"{source!r} holds test questions, which must never be trained on",
                          "mine a dev or train split (nq-dev, triviaqa-dev) or your own QA file")
    path = Path(source).expanduser()
    questions = read_qa_jsonl(path) if path.is_file() else load_dataset(source).questions
    return questions[:limit] if limit is not None else questions


@dataclass
class MinedLists:
    lists: list[RetrievedList]
    questions: int
    skipped: dict[str, int] = field(default_factory=dict)


def answer_in(text: str, answers: Sequence[str], *, regex: bool = False) -> str:
    """The gold answer as it occurs in ``text`` (the assistant's target), else the first gold answer."""
    if regex:
        for pattern in answers:
            found = compile_answer_regex(pattern).search(text)
            if found:
                return found.group(0)
        return answers[0]
    return next((answer for answer in answers if has_answer(text, answer)), answers[0])


def mine_lists(questions: Sequence[QAItem], index: BM25Index, *, depth: int, source: str,
               advance: Callable[[int], None] | None = None, batch: int = 256) -> MinedLists:
    """One :class:`RetrievedList` per question whose BM25 top ``depth`` holds an answer."""
    mined = MinedLists([], len(questions))
    for start in range(0, len(questions), batch):
        chunk = questions[start:start + batch]
        found = index.search_many([q.question for q in chunk], k=depth)
        for offset, (item, hits) in enumerate(zip(chunk, found, strict=True)):
            passages: list[Passage] = hits.passages
            holds = AnswerMatcher(item.golden_answers, regex=item.is_regex)
            # Passage text only, as answer Recall@k in winnow.evaluation tests it.
            gold = next((p for p in passages if holds(p.text)), None)
            if gold is None:
                reason = NO_ANSWER_PASSAGE.format(depth=depth)
                mined.skipped[reason] = mined.skipped.get(reason, 0) + 1
                continue
            where = Where(source, start + offset + 1)  # the question's position in its set
            retrieved = [p for p in passages if p.id != gold.id]
            mined.lists.append(RetrievedList(where, item.question, list(item.golden_answers), gold, retrieved,
                                              regex=item.is_regex))
        if advance:
            advance(len(chunk))
    return mined
