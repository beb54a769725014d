"""Build RankRAG's Stage-II instruction-tuning blend (Yu et al., 2024, §4.2, Table 1, Appendices B-C).

Each component of the blend file (:mod:`.blend_config`) becomes a pool of chat examples in the
unified format (:mod:`.examples`); examples whose question matches an evaluation question are
dropped (:mod:`.contamination`); then every component contributes its share of the blend (Appendix
B's ratios, normalised), drawn from a seeded permutation of its pool (cycled, and the repeats
counted, when the pool is smaller than its share), and the whole blend is shuffled with the seed.

The output folder holds ``train.jsonl`` (one ``{"id", "component", "kind", "messages"}`` per line,
the last message being the assistant's target, the only one trained on) and ``stats.json``
(per-component pool sizes, counts, skips, contamination, and rendered samples). It is written in a
temporary sibling and renamed into place.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..answers import AnswerMatcher
from ..atomic import atomic_folder, check_replaceable, write_json
from ..errors import WinnowError
from ..records import Passage
from ..version import __version__
from . import examples as ex
from .blend_config import PASSAGES_PER_LIST, BlendConfig, ComponentSpec, read_blend_config
from .contamination import EvalQuestions, default_eval_sets, load_eval_questions
from .mining import answer_in, load_training_questions, mine_lists
from .pseudo_relevance import label_chunks
from .sources import ConvDocument, Conversation, GoldQA, RankingPair, RetrievedList, read_component_file

FORMAT = 1
TRAIN_FILE = "train.jsonl"
STATS_FILE = "stats.json"
SAMPLES_PER_COMPONENT = 2
NO_NEGATIVE = "no retrieved passage without an answer (no negative for the pair)"
SHORT_LIST = f"fewer than {PASSAGES_PER_LIST} passages"
CONTAMINATED = "question of an evaluation set"
NO_CHUNK_LABELLED = "no chunk above 0.5 or below 0.1 4-gram recall"

Advance = Callable[[str, int, int | None], None]  # (what, done, total) progress reports
Mined = tuple[list[RetrievedList], int, Counter[str]]  # the lists, the questions read, why the others were skipped
MinedCache = dict[tuple[str, str, int, int | None], Mined]  # keyed by (questions, index, depth, limit)


@dataclass
class ComponentPool:
    """The examples one component can offer, and what happened on the way."""

    spec: ComponentSpec
    examples: list[ex.ChatExample]
    records: int
    skipped: Counter[str] = field(default_factory=Counter)
    contaminated: Counter[str] = field(default_factory=Counter)  # evaluation set -> matching examples


@dataclass
class BlendReport:
    out: Path
    stats: dict[str, Any]
    seconds: float


def build_blend(config_path: str | Path, out: str | Path, *, overwrite: bool = False,
                progress: Advance | None = None) -> BlendReport:
    """Build the blend described by ``config_path`` into the folder ``out``."""
    started = time.perf_counter()
    config = read_blend_config(config_path)
    out = Path(out).expanduser()
    # Fail before the work, not after it.
    check_replaceable(out, overwrite=overwrite, looks_ours=is_blend_folder, what="a blend folder")
    eval_names = config.eval_sets if config.eval_sets is not None else default_eval_sets()
    eval_questions = load_eval_questions(eval_names, base=config.path.parent,
                                         loaded=lambda name: _report(progress, f"read evaluation set {name}", 1, None))
    mined_cache: MinedCache = {}
    pools = [_pool(spec, config.seed, eval_questions, mined_cache, progress) for spec in config.components]
    empty = [pool for pool in pools if not pool.examples]
    if empty:
        details = "; ".join(f"{p.spec.name}: {p.records} records, skipped {dict(p.skipped)}, "
                            f"contaminated {sum(p.contaminated.values())}" for p in empty)
        raise WinnowError(f"component(s) with no usable example: {details}",
                          "check the data file or mining settings (depth, index), or remove the component")
    rows, stats = mix(config, pools)
    stats.update(contamination=_contamination_stats(eval_questions, pools), seconds=0.0,
                 built_by=f"winnow {__version__}")
    with atomic_folder(out, overwrite=overwrite, looks_ours=is_blend_folder, what="a blend folder") as temp:
        _write_jsonl(temp / TRAIN_FILE, rows)
        stats["seconds"] = round(time.perf_counter() - started, 2)
        write_json(temp / STATS_FILE, stats)
    return BlendReport(out, stats, time.perf_counter() - started)


def _report(progress: Advance | None, what: str, done: int, total: int | None) -> None:
    if progress:
        progress(what, done, total)


def is_blend_folder(folder: Path) -> bool:
    """An earlier blend, which ``--overwrite`` may replace."""
    return (folder / STATS_FILE).is_file()


def _write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


# --- pools --------------------------------------------------------------------------------------

def _pool(spec: ComponentSpec, seed: int, eval_questions: EvalQuestions, mined_cache: MinedCache,
          progress: Advance | None) -> ComponentPool:
    rng = random.Random(f"{seed}:{spec.name}")  # str seeds are hashed deterministically (sha512)
    if spec.mined:
        records, questions, skipped = _mined(spec, mined_cache, progress)
        pool = ComponentPool(spec, [], questions, Counter(skipped))
    else:
        assert spec.path is not None  # read_blend_config gives every component a data file or qa + index
        records = read_component_file(spec.kind, spec.path, spec.limit)
        pool = ComponentPool(spec, [], len(records))
    for example in render(spec, records, rng, pool.skipped):
        hits = eval_questions.matches(example.question)
        if hits:
            pool.contaminated.update(hits)
            pool.skipped[CONTAMINATED] += 1
            continue
        pool.examples.append(example)
    _report(progress, f"component {spec.name}: {len(pool.examples)} examples", 1, None)
    return pool


def _mined(spec: ComponentSpec, cache: MinedCache, progress: Advance | None) -> Mined:
    """Lists mined once per (questions, index, depth, limit), shared by the components that use them."""
    from ..index import BM25Index

    qa, index_dir = spec.qa, spec.index
    assert qa is not None and index_dir is not None  # read_blend_config requires both for a mined component
    key = (qa, str(index_dir), spec.depth, spec.limit)
    if key not in cache:
        questions = load_training_questions(qa, spec.limit)
        index = BM25Index.open(index_dir)
        done = 0

        def advance(n: int) -> None:
            nonlocal done
            done += n
            _report(progress, f"mining {qa} against {index_dir.name}", done, len(questions))

        mined = mine_lists(questions, index, depth=spec.depth, source=qa, advance=advance)
        cache[key] = (mined.lists, mined.questions, Counter(mined.skipped))
    lists, read, skipped = cache[key]
    return lists, read, Counter(skipped)


def render(spec: ComponentSpec, records: Sequence[Any], rng: random.Random,
           skipped: Counter[str]) -> list[ex.ChatExample]:
    """The unified-format examples of ``records`` for a component of ``spec.kind``."""
    name, kind = spec.name, spec.kind
    out: list[ex.ChatExample] = []
    for record in records:
        if kind == "sft":
            out.append(ex.chat_sft(name, _check_type(record, Conversation).messages))
        elif kind == "context_qa":
            if isinstance(record, RetrievedList):  # mined: the gold passage alone
                record = GoldQA(record.where, record.question, record.answers, record.gold)
            record = _check_type(record, GoldQA)
            out.append(ex.context_qa(name, record.question, record.passage,
                                     answer_in(record.passage.text, record.answers), style=spec.answer_style,
                                     history=record.history))
        elif kind in ("rag_qa", "rag_ranking"):
            record = _check_type(record, RetrievedList)
            # §4.2: the gold context plus the top BM25 contexts, five in all, in shuffled order.
            others = [p for p in record.retrieved if p.id != record.gold.id][:PASSAGES_PER_LIST - 1]
            if len(others) < PASSAGES_PER_LIST - 1:
                skipped[SHORT_LIST] += 1
                continue
            passages = [record.gold, *others]
            rng.shuffle(passages)
            if kind == "rag_qa":
                target = answer_in(record.gold.text, record.answers, regex=record.regex)
                out.append(ex.rag_qa(name, record.question, passages, target, wording=spec.prompt))
            else:
                holds = AnswerMatcher(record.answers, regex=record.regex)
                labels = [p.id == record.gold.id or holds(p.text) for p in passages]
                out.append(ex.rag_ranking(name, record.question, passages, labels))
        elif kind == "ranking":
            if isinstance(record, RetrievedList):  # mined: the gold pair and one hard negative
                holds = AnswerMatcher(record.answers, regex=record.regex)
                negatives = [p for p in record.retrieved if not holds(p.text)]
                if not negatives:
                    skipped[NO_NEGATIVE] += 1
                    continue
                out.append(ex.context_ranking(name, record.question, record.gold, True))
                out.append(ex.context_ranking(name, record.question, rng.choice(negatives), False))
            else:
                record = _check_type(record, RankingPair)
                out.append(ex.context_ranking(name, record.question, record.passage, record.relevant,
                                              history=record.history))
        elif kind == "conv_ranking":
            record = _check_type(record, ConvDocument)
            labelled = label_chunks(record.document, record.answers[0])
            if not labelled:
                skipped[NO_CHUNK_LABELLED] += 1
            for number, (chunk, relevant) in enumerate(labelled):
                passage = Passage(f"{record.where}:chunk{number}", chunk)
                out.append(ex.context_ranking(name, record.question, passage, relevant, history=record.history))
        else:  # pragma: no cover - kinds are checked when the config is read
            raise WinnowError(f"unknown component kind {kind!r}")
    return out


def _check_type(record: Any, expected: type) -> Any:
    if not isinstance(record, expected):  # pragma: no cover - readers and kinds are paired in sources
        raise WinnowError(f"internal: expected {expected.__name__}, got {type(record).__name__}")
    return record


# --- mixing -------------------------------------------------------------------------------------

def component_counts(shares: dict[str, float], size: int) -> dict[str, int]:
    """``size`` split by ``shares`` with the largest-remainder rule (the counts sum to ``size``)."""
    exact = {name: share * size for name, share in shares.items()}
    counts = {name: int(value) for name, value in exact.items()}
    by_remainder = sorted(shares, key=lambda name: (-(exact[name] - counts[name]), name))
    for name in by_remainder[:size - sum(counts.values())]:
        counts[name] += 1
    return counts


def default_size(shares: dict[str, float], pool_sizes: dict[str, int]) -> int:
    """The largest blend in which no component repeats an example."""
    return max(1, min(int(pool_sizes[name] / share) for name, share in shares.items()))


def mix(config: BlendConfig, pools: Sequence[ComponentPool]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The blend's rows (seeded, shuffled) and its statistics."""
    shares = config.shares()
    sizes = {pool.spec.name: len(pool.examples) for pool in pools}
    size = config.size or default_size(shares, sizes)
    counts = component_counts(shares, size)
    rows: list[dict[str, Any]] = []
    components: dict[str, Any] = {}
    for pool in pools:
        name = pool.spec.name
        rng = random.Random(f"{config.seed}:{name}:draw")
        order = list(range(len(pool.examples)))
        drawn: list[int] = []
        while len(drawn) < counts[name]:  # a fresh permutation each pass: repeats spread evenly
            rng.shuffle(order)
            drawn.extend(order[:counts[name] - len(drawn)])
        for number, position in enumerate(drawn):
            example = pool.examples[position]
            rows.append({**example.to_dict(f"{name}:{number}"), "kind": pool.spec.kind})
        targets = Counter(pool.examples[i].messages[-1]["content"] for i in drawn) if pool.spec.kind in (
            "ranking", "conv_ranking") else None
        components[name] = {
            **pool.spec.describe(), "share": round(shares[name], 6), "source_records": pool.records,
            "pool": sizes[name], "taken": counts[name], "repeats": max(0, counts[name] - sizes[name]),
            "skipped": dict(pool.skipped), "contaminated": dict(pool.contaminated),
            **({"targets": dict(targets)} if targets is not None else {}),
            "samples": [ex.render_plain(pool.examples[i].messages, pool.examples[i].context_chars)
                        for i in drawn[:SAMPLES_PER_COMPONENT]],
        }
    random.Random(f"{config.seed}:blend").shuffle(rows)
    stats = {"format": FORMAT, "config": str(config.path), "seed": config.seed, "size": len(rows),
             "size_source": "config" if config.size else "largest without repeats", "components": components}
    return rows, stats


def _contamination_stats(eval_questions: EvalQuestions, pools: Sequence[ComponentPool]) -> dict[str, Any]:
    by_set: Counter[str] = Counter()
    for pool in pools:
        by_set.update(pool.contaminated)
    return {"method": "exact match of SQuAD-normalised questions (RankRAG §4.1: no overlap with evaluation data)",
            "eval_sets": dict(eval_questions.sizes), "dropped_examples": dict(by_set),
            "dropped_total": sum(p.skipped[CONTAMINATED] for p in pools)}
