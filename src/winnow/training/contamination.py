"""The string-match contamination check between training and evaluation questions.

RankRAG makes sure "there is no overlap between SFT data and data from evaluation tasks" (§4.1).
Here a training example is contaminated when its question, SQuAD-normalised (lower case, no
punctuation or articles, single spaces), equals a normalised question of an evaluation set. Such
examples are dropped from the blend, and the matches are counted per component and per set.

Evaluation sets are named like datasets (``nq-test``), QA JSONL files, or a folder holding
``dev.jsonl`` / ``test.jsonl`` (the wiki-vital QA benchmark that ``winnow bench-data build`` makes).
By default: every open-domain QA test set Winnow ships loaders for, and wiki-vital QA if it has been
built in the cache folder.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..answers import normalize_answer
from ..datasets import load_dataset, read_qa_jsonl
from ..errors import WinnowError
from ..paths import cache_root

DEFAULT_TEST_SETS = ("nq-test", "triviaqa-test", "squad-test", "webq-test", "curatedtrec-test")
BENCHMARK_SPLITS = ("dev.jsonl", "test.jsonl")


def normalise_question(text: str) -> str:
    return normalize_answer(text)


def default_eval_sets() -> list[str]:
    sets = list(DEFAULT_TEST_SETS)
    wiki_vital_qa = cache_root() / "wiki-vital-qa"
    if (wiki_vital_qa / "test.jsonl").is_file():
        sets.append(str(wiki_vital_qa))
    return sets


@dataclass
class EvalQuestions:
    """Normalised questions per evaluation set (a folder contributes one set per split file)."""

    sets: dict[str, set[str]] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)

    def matches(self, question: str) -> list[str]:
        key = normalise_question(question)
        return [name for name, questions in self.sets.items() if key in questions]


def load_eval_questions(names: Iterable[str], *, base: Path | None = None,
                        loaded: Callable[[str], None] | None = None) -> EvalQuestions:
    """Read each evaluation set named in ``names``; a name that is none of the accepted forms is an error."""
    found = EvalQuestions()
    for name in names:
        path = Path(name).expanduser()
        if not path.is_absolute() and base is not None and (base / path).exists():
            path = base / path
        if path.is_dir():
            splits = [path / split for split in BENCHMARK_SPLITS if (path / split).is_file()]
            if not splits:
                raise WinnowError(f"evaluation set folder {path} has no {' or '.join(BENCHMARK_SPLITS)}",
                                  "give a dataset name, a QA JSONL file or a folder made by `winnow bench-data build`")
            sources = {f"{path.name}/{split.stem}": [q.question for q in read_qa_jsonl(split)] for split in splits}
        elif path.is_file():
            sources = {path.name: [q.question for q in read_qa_jsonl(path)]}
        else:
            sources = {name: [q.question for q in load_dataset(name).questions]}
        for label, questions in sources.items():
            found.sets[label] = {normalise_question(q) for q in questions}
            found.sizes[label] = len(questions)
        if loaded:
            loaded(name)
    return found
