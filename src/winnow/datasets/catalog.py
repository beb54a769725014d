"""The named datasets Winnow can load offline: every QA set, BEIR test set and TREC DL passage set
bundled in Pyserini 0.21.0's jar (see :mod:`.anserini`); :func:`load_dataset` also takes a BEIR
folder or an ``ir_datasets`` id.

A :class:`Dataset` is uniform across kinds so that ``winnow data export`` and ``winnow eval`` treat them
alike: its ``questions`` are :class:`QAItem` records (QA sets carry gold answers; BEIR and DL queries
have none and carry ``qrels`` instead).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..errors import WinnowError
from .anserini import VERSION, jar_entries, load_qa_entry, load_qrels_entry, load_topics_entry
from .beir_folder import load_beir_folder
from .benchmarks import is_benchmark_file, load_benchmark_file
from .dataset import BEIR, QA, TREC_DL, Dataset
from .irds import PREFIX as IRDS_PREFIX
from .irds import load_ir_dataset
from .qa import QAItem

_BEIR_TOPICS = re.compile(r"topics\.beir-v1\.0\.0-(?P<name>[a-z0-9-]+)\.test\.tsv\.gz")
BEIR_LICENCE = "varies: see each BEIR source's terms"
MS_MARCO_LICENCE = "MS MARCO: non-commercial research only"


@dataclass(frozen=True, slots=True)
class DatasetSpec:
    """A named dataset: what it is, where it comes from, its licence, and how to load it."""

    name: str
    kind: str
    description: str
    source: str
    licence: str
    load: Callable[[], Dataset]
    expected: int | None = None  # question count as published, checked by the tests


def _qa(name: str, entry: str, layout: str, description: str, licence: str, expected: int,
        regex: bool = False) -> DatasetSpec:
    source = f"pyserini {VERSION}: {entry}"

    def load() -> Dataset:
        return Dataset(name, QA, load_qa_entry(entry, layout, name, regex=regex), None, source, licence)

    return DatasetSpec(name, QA, description, source, licence, load, expected)


def _retrieval(name: str, kind: str, topics: str, qrels: str, description: str, licence: str,
               expected: int | None = None) -> DatasetSpec:
    source = f"pyserini {VERSION}: {topics}, {qrels}"

    def load() -> Dataset:
        topics_text = load_topics_entry(topics)
        questions = [QAItem(query_id, text, [], {"dataset": name}) for query_id, text in topics_text.items()]
        return Dataset(name, kind, questions, load_qrels_entry(qrels), source, licence)

    return DatasetSpec(name, kind, description, source, licence, load, expected)


NQ_LICENCE = "CC BY-SA 3.0"
TRIVIAQA_LICENCE = "Apache-2.0 (authors' repository); card: unknown"
QA_SPECS = [
    _qa("nq-test", "topics.nq.test.txt", "python-list", "Natural Questions, open-domain test split", NQ_LICENCE, 3610),
    _qa("nq-dev", "topics.nq.dev.txt", "python-list", "Natural Questions, open-domain dev split (DPR)", NQ_LICENCE,
        8757),
    _qa("triviaqa-test", "topics.dpr.trivia.test.txt", "csv", "TriviaQA unfiltered, open-domain test split",
        TRIVIAQA_LICENCE, 11313),
    _qa("triviaqa-dev", "topics.dpr.trivia.dev.txt", "csv", "TriviaQA unfiltered, open-domain dev split",
        TRIVIAQA_LICENCE, 8837),
    _qa("squad-test", "topics.dpr.squad.test.txt", "json", "SQuAD v1.1 dev questions, open-domain",
        "CC BY-SA 4.0", 10570),
    _qa("webq-test", "topics.dpr.wq.test.txt", "json", "WebQuestions test split", "not stated", 2032),
    _qa("curatedtrec-test", "topics.dpr.curated.test.txt", "json", "CuratedTREC test split, answers are regexes",
        "not stated", 694, regex=True),
]
DL_SPECS = [
    _retrieval("dl19-passage", TREC_DL, "topics.dl19-passage.txt", "qrels.dl19-passage.txt",
               "TREC 2019 Deep Learning, passage task (judged topics)", MS_MARCO_LICENCE, 43),
    _retrieval("dl20-passage", TREC_DL, "topics.dl20.txt", "qrels.dl20-passage.txt",
               "TREC 2020 Deep Learning, passage task (all 200 topics; 54 judged)", MS_MARCO_LICENCE, 200),
]


@lru_cache(maxsize=1)
def beir_specs() -> tuple[DatasetSpec, ...]:
    """One spec per BEIR test set whose topics and qrels are both in the jar (named ``beir/<name>``)."""
    entries = set(jar_entries())
    specs = []
    for entry in sorted(entries):
        match = _BEIR_TOPICS.fullmatch(entry)
        qrels = f"qrels.beir-v1.0.0-{match['name']}.test.txt" if match else ""
        if match and qrels in entries:
            specs.append(_retrieval(f"beir/{match['name']}", BEIR, entry, qrels,
                                    f"BEIR {match['name']} test queries and qrels (no corpus)", BEIR_LICENCE))
    return tuple(specs)


def dataset_specs() -> list[DatasetSpec]:
    """Every named dataset: QA sets, TREC DL, then BEIR (read from the jar's listing)."""
    return [*QA_SPECS, *DL_SPECS, *beir_specs()]


def find_spec(name: str) -> DatasetSpec:
    """The spec called ``name``; :class:`WinnowError` naming close matches if there is none."""
    specs = {spec.name: spec for spec in dataset_specs()}
    if name in specs:
        return specs[name]
    close = difflib.get_close_matches(name, specs, n=3)
    hint = f"did you mean {', '.join(close)}?" if close else "run `winnow data list` for the names"
    raise WinnowError(f"no dataset called {name!r}", f"{hint}; a BEIR folder or irds:<ir_datasets id> also works")


def load_dataset(name: str, *, split: str = "test") -> Dataset:
    """A dataset by name: a name from :func:`dataset_specs` (read from the Pyserini jar), ``irds:<id>``
    (an ``ir_datasets`` id, downloaded), the path of a BEIR folder (its ``split`` queries and qrels),
    or ``LAYOUT:PATH``, a benchmark file as downloaded (KILT, ASQA, ARC, MIRAGE, PopQA, TopiOCQA,
    INSCIT, Doc2Dial: :mod:`.benchmarks`)."""
    if is_benchmark_file(name):
        return load_benchmark_file(name)
    if name.startswith(IRDS_PREFIX):
        return load_ir_dataset(name.removeprefix(IRDS_PREFIX))
    if name not in {spec.name for spec in dataset_specs()} and Path(name).expanduser().is_dir():
        return load_beir_folder(name, split)
    return find_spec(name).load()
