"""``winnow report``: several run folders side by side in one Markdown file, with PNG plots beside it.

Tables: answers and cost per run (the first-stage ranking alone as the baseline row, as every
results table should have); answer Recall@k of every list each method produced (RankRAG Tables 6
and 8: before and after reranking); qrels metrics when the runs had ``--qrels``. Plots: see
:mod:`.plots`. Everything is read from each folder's ``metrics.json``, ``answers.jsonl`` and
``config.json``; nothing is re-run.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..atomic import write_text
from ..errors import WinnowError
from ..writable import make_parent
from . import plots
from .cost import split_costs, usd_cost
from .paired import holm, paired_difference
from .prices import PriceTable
from .runfolder import CONFIG, RunFolder
from .schema import ACCURACY_NAMES, Metrics, QuestionRecord


@dataclass
class LoadedRun:
    path: Path
    config: dict[str, Any]  # config.json: the run's identity and sessions
    metrics: Metrics
    records: list[QuestionRecord]  # the chosen questions that were answered, in metrics order
    folder_label: str = ""  # set by distinguish_labels when another run has the same settings

    @property
    def label(self) -> str:
        label = self.metrics.run.label
        return f"{label} ({self.folder_label})" if self.folder_label else label

    @property
    def question_ids(self) -> tuple[str, ...]:
        return tuple(r.id for r in self.records)


def with_sweeps_opened(paths: Sequence[str | Path]) -> list[Path]:
    """The run folders given, a folder of run folders (``winnow eval --sweep``'s OUT: one per value, and
    its sweep.json) standing for its runs, in name order; so ``winnow report runs/*`` takes a sweep too."""
    opened: list[Path] = []
    for path in map(Path, paths):
        inside = sorted(child for child in path.iterdir() if (child / CONFIG).is_file()) \
            if path.is_dir() and not (path / CONFIG).exists() else []
        opened += inside or [path]
    return opened


def load_run(path: str | Path) -> LoadedRun:
    folder = RunFolder(path)
    config = folder.read_config()
    if config is None:
        raise WinnowError(f"{folder.path} is not a run folder (no config.json)", "give folders made by `winnow eval`")
    metrics = folder.read_metrics()
    if metrics is None:
        raise WinnowError(f"{folder.path} has no metrics.json yet",
                          "run its `winnow eval` command again: with nothing left to ask it just writes the metrics")
    answered = folder.read_answers() if folder.answers_path.is_file() else {}
    # metrics.json names the questions it scored; answers.jsonl may hold more (a --limit that shrank).
    records = [answered[qid] for qid in metrics.question_ids if qid in answered]
    return LoadedRun(folder.path, config, metrics, records)


def distinguish_labels(runs: Sequence[LoadedRun]) -> None:
    """Runs of the same settings share a label (it names the method, model and settings): add each
    one's folder name, or its whole path when the names agree too, so every row names one run."""
    groups: dict[str, list[LoadedRun]] = defaultdict(list)
    for run in runs:
        groups[run.metrics.run.label].append(run)
    for members in groups.values():
        if len(members) > 1:
            names_differ = len({run.path.name for run in members}) == len(members)
            for run in members:
                run.folder_label = run.path.name if names_differ else str(run.path)


# --- formatting -------------------------------------------------------------------------------------

def pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def num(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: Sequence[str] | None = None) -> str:
    align = align or ["l"] + ["r"] * (len(header) - 1)
    rule = ["---:" if a == "r" else ":---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:60] or "x"


# --- baselines ----------------------------------------------------------------------------------------

@dataclass
class Baseline:
    label: str
    run: LoadedRun  # the run whose first-stage lists stand for every run of the group
    tag: str = ""  # " (question set n)" when the runs answered different questions


def baselines(runs: Sequence[LoadedRun]) -> tuple[list[Baseline], dict[Path, Baseline]]:
    """One first-stage row per distinct (retriever, questions); runs on the same questions share it."""
    groups: dict[tuple[Any, ...], list[LoadedRun]] = defaultdict(list)
    for run in runs:
        key = (run.metrics.run.retriever, run.config["identity"]["index"].get("source_checksum"),
               run.question_ids)
        groups[key].append(run)
    result, by_run = [], {}
    for number, members in enumerate(groups.values(), start=1):
        best = max(members, key=lambda r: r.metrics.first_stage_depth)
        depth = best.metrics.first_stage_depth
        tag = f" (question set {number})" if len(groups) > 1 else ""
        baseline = Baseline(f"first stage: {best.metrics.run.retriever} top-{depth} alone{tag}", best, tag)
        result.append(baseline)
        for member in members:
            by_run[member.path] = baseline
    return result, by_run


def after_reranking_row(metrics: Metrics) -> str:
    """The list that shows a method's reranking best: the blended order when scores were fused
    (that is the order the method reads from), else its deepest list after the first retrieval
    (RankRAG's ``rerank``, MAIN-RAG's ``judge``, RankGPT's and RRR's ``listwise``), else ``final``."""
    if "fusion" in metrics.rows:
        return "fusion"
    rows = [row for row in metrics.rows if row not in ("first_stage", "retrieve", "final")]
    if not rows:
        return "final"
    lengths = metrics.list_length
    return max(reversed(rows), key=lambda row: lengths[row])


# --- the report ----------------------------------------------------------------------------------------

def answers_table(runs: Sequence[LoadedRun], bases: Sequence[Baseline], by_run: dict[Path, Baseline]) -> str:
    header = ["run", "questions", "EM", "F1", "Acc.", "LLM calls/q", "prompt tok/q", "completion tok/q",
              "s/q", "cache hits"]
    rows = []
    for base in bases:
        m = base.run.metrics
        rows.append([f"*{base.label}*", str(m.questions.answered), "–", "–", "–", "0", "0", "0",
                     num(m.cost.first_stage_seconds_per_question, 3), "–"])
    for run in runs:
        m, c = run.metrics, run.metrics.cost
        questions = f"{m.questions.answered}/{m.questions.selected}"
        # A paper profile's run quotes the papers' cited accuracy, Winnow's normalised one beside it.
        quoted = m.headline_accuracy
        accuracy = pct(m.answer.accuracy) if not quoted else \
            f"{pct(m.answer.headline(quoted))} ({ACCURACY_NAMES[quoted]}; normalised {pct(m.answer.accuracy)})"
        rows.append([run.label + by_run[run.path].tag, questions,
                     pct(m.answer.em), pct(m.answer.f1), accuracy,
                     num(c.llm_calls_per_question), num(c.prompt_tokens_per_question, 0),
                     num(c.completion_tokens_per_question, 0), num(c.seconds_per_question, 2),
                     str(c.cache_hits)])
    return md_table(header, rows)


def uncached_cost_table(runs: Sequence[LoadedRun]) -> str | None:
    """Per question, what each run that used the call cache would cost without it (None if none did)."""
    header = ["run", "cache hits", "LLM calls/q", "prompt tok/q", "completion tok/q", "model s/q"]
    rows = []
    for run in runs:
        cost = run.metrics.cost
        if not cost.cache_hits:
            continue
        full = cost.without_cache
        if full is None:
            rows.append([run.label, str(cost.cache_hits), *["not recorded"] * 4])
            continue
        rows.append([run.label, str(cost.cache_hits), num(full.llm_calls_per_question),
                     num(full.prompt_tokens_per_question, 0), num(full.completion_tokens_per_question, 0),
                     num(full.llm_seconds_per_question, 2)])
    return md_table(header, rows) if rows else None


def model_cost_table(runs: Sequence[LoadedRun], prices: PriceTable | None) -> tuple[str, list[str]] | None:
    """Per run, its LLM cost per model and per agent role, per question (GAR-meets-RAG App. B,
    Table A1), with USD per question and in all when a price table is given; and the notes on runs
    whose answers predate the split or whose models the table does not price. None without runs."""
    header = ["run", "model / role", "calls/q", "prompt tok/q", "completion tok/q", "cache hits",
              *(["USD/q", "USD total"] if prices else [])]
    rows, notes = [], []
    for run in runs:
        split = split_costs(run.records, prices)
        if split is None:
            notes.append(f"{run.label}: its answers predate the cost per model (not recorded)")
            continue
        count = max(len(run.records), 1)
        by_model, by_role = split
        labelled = [(f"model {name}", cost) for name, cost in by_model.items()]
        labelled += [(f"role {name} ({', '.join(cost.models)})", cost) for name, cost in by_role.items()]
        for number, (label, cost) in enumerate(labelled):
            money = []
            if prices:
                money = ["no price", "–"] if cost.usd is None else [f"{cost.usd / count:,.6f}", f"{cost.usd:,.4f}"]
            rows.append([run.label if number == 0 else "", label, num(cost.llm_calls / count),
                         num(cost.prompt_tokens / count, 0), num(cost.completion_tokens / count, 0),
                         str(cost.cache_hits), *money])
        if prices:
            usd = usd_cost(by_model, prices, len(run.records))
            if usd.total is None:
                notes.append(f"{run.label}: no USD total, {prices.path} has no price for "
                             f"{', '.join(usd.unpriced_models)}")
            else:
                rows.append(["", "**all models**", "", "", "", "", f"{usd.per_question:,.6f}", f"{usd.total:,.4f}"])
    return (md_table(header, rows, ["l", "l"] + ["r"] * (len(header) - 2)), notes) if rows or notes else None


def recall_table(runs: Sequence[LoadedRun], bases: Sequence[Baseline], by_run: dict[Path, Baseline]) -> str:
    ks = sorted({name for run in runs for name in run.metrics.answer_recall["first_stage"]},
                key=lambda name: int(name.split("@")[1]))
    header = ["run", "list", "mean length", *ks]
    rows = []

    def row(label: str, name: str, metrics: Metrics) -> list[str]:
        recall = metrics.answer_recall[name]
        return [label, name, num(metrics.list_length[name]), *[pct(recall.get(k)) for k in ks]]

    for base in bases:
        rows.append(row(f"*{base.label}*", "first_stage", base.run.metrics))
    for run in runs:
        for number, name in enumerate(r for r in run.metrics.rows if r != "first_stage"):
            rows.append(row(run.label + by_run[run.path].tag if number == 0 else "", name, run.metrics))
    return md_table(header, rows, ["l", "l"] + ["r"] * (len(header) - 2))


def qrels_table(runs: Sequence[LoadedRun], bases: Sequence[Baseline], by_run: dict[Path, Baseline]) -> str:
    judged = [run for run in runs if run.metrics.qrels]
    names: list[str] = []
    for run in judged:
        for values in run.metrics.qrels.rows.values() if run.metrics.qrels else ():
            names += [n for n in values if n != "judged_questions" and n not in names]  # nDCG@k, MRR@10, MAP, R@k
    header = ["run", "list", "judged questions", *names]
    rows = []

    def row(label: str, name: str, metrics: Metrics) -> list[str]:
        values = metrics.qrels.rows[name] if metrics.qrels else {}
        return [label, name, str(values["judged_questions"]), *[num(values.get(n), 3) for n in names]]

    for base in bases:
        if base.run.metrics.qrels:
            rows.append(row(f"*{base.label}*", "first_stage", base.run.metrics))
    for run in judged:
        for number, name in enumerate(r for r in run.metrics.rows if r != "first_stage"):
            rows.append(row(run.label + by_run[run.path].tag if number == 0 else "", name, run.metrics))
    return md_table(header, rows, ["l", "l"] + ["r"] * (len(header) - 2))


def vanilla_reference(run: LoadedRun, runs: Sequence[LoadedRun]) -> LoadedRun | None:
    """The vanilla run to pair ``run`` with: one that answered every question of it, the one on exactly
    its questions first, else the smallest (a run extended step by step, e.g. vanilla at 200 and a
    slower method at 100 of the same seeded sample, is paired on the questions they share)."""
    wanted = set(run.question_ids)
    # A vanilla run of the same settings (the same run cut at another size) is no comparison.
    covering = [other for other in runs if other.metrics.run.method == "vanilla"
                and other.metrics.run.label != run.metrics.run.label
                and wanted <= set(other.question_ids)]
    return min(covering, key=lambda other: len(other.records), default=None)


def paired_table(runs: Sequence[LoadedRun]) -> str | None:
    """Each run against a vanilla run that answered its questions (see :func:`vanilla_reference` and
    :mod:`.paired`); None when no run has one. Runs left unpaired are named under the table, so a
    missing row is never silent. Accuracy is MAIN-RAG's measure (§4.1), EM RankRAG's for the QA sets
    (Table 2), F1 the graded one. With more than one comparison (more than two runs), each metric's
    p-values are Holm-adjusted over the comparisons (:func:`.paired.holm`), and the table says so."""
    compared, unpaired = [], []
    for run in runs:
        reference = vanilla_reference(run, runs)
        if reference is None:
            if run.metrics.run.method != "vanilla":
                unpaired.append(run.label)
            continue
        by_id = {record.id: record for record in reference.records}
        shared = [by_id[record.id] for record in run.records]
        against = reference.label if len(shared) == len(reference.records) else \
            f"{reference.label}, on {len(shared)} of its {len(reference.records)} questions"
        diffs = {metric: paired_difference([r.scores.of(metric) for r in shared],
                                           [r.scores.of(metric) for r in run.records]) for metric in PAIRED_SCORES}
        compared.append((run, against, diffs))
    if not compared:
        return None
    adjusted = len(compared) > 1
    p_values = {metric: holm([diffs[metric].p_value for _, _, diffs in compared]) if adjusted
                else [diffs[metric].p_value for _, _, diffs in compared] for metric in PAIRED_SCORES}
    p_label = "p Holm" if adjusted else "p"
    header = ["run", "against", "questions", "Acc. wins/losses/ties", "Δ Acc. [95% CI]", f"{p_label} (Acc.)",
              "Δ EM [95% CI]", f"{p_label} (EM)", "Δ F1 [95% CI]", f"{p_label} (F1)"]
    rows = []
    for position, (run, against, diffs) in enumerate(compared):
        cells = [run.label, against, str(len(run.records))]
        for metric in PAIRED_SCORES:
            diff = diffs[metric]
            if metric == "accuracy":
                cells.append(f"{diff.wins}/{diff.losses}/{diff.ties}")
            cells += [f"{100 * diff.mean_difference:+.1f} [{100 * diff.low:+.1f}, {100 * diff.high:+.1f}]",
                      f"{p_values[metric][position]:.2f}"]
        rows.append(cells)
    table = md_table(header, rows, ["l", "l"] + ["r"] * (len(header) - 2))
    if adjusted:
        table += (f"\n\np Holm: each metric's p-values adjusted by Holm's step-down method over the "
                  f"{len(compared)} comparisons of this table, so that a gain read from any of them holds at the "
                  "stated level (the intervals are not adjusted).")
    if unpaired:
        table += ("\n\nNot paired (no vanilla run answered all their questions; run vanilla with the same "
                  f"--seed and a --limit at least theirs): {', '.join(unpaired)}")
    return table


# The scores compared question by question: MAIN-RAG's accuracy (§4.1), RankRAG's EM (Table 2), F1.
PAIRED_SCORES = ("accuracy", "em", "f1")

# Stage kinds whose job is to reorder the list; one that hands back the order it was given did nothing.
REORDERING_KINDS = ("pointwise-true", "listwise", "noisy-document-judge", "score-fusion", "embedding-cosine",
                    "cross-encoder", "monot5")


def unchanged_stages(run: LoadedRun) -> list[str]:
    """"<run>: <stage> for 10 of 10 questions" for each reordering stage of ``run`` that left the
    order unchanged for at least half of its questions (e.g. a listwise model that copies the
    prompt's example), so that a method which did nothing is not mistaken for one that did."""
    seen: Counter[str] = Counter()
    unchanged: Counter[str] = Counter()
    for record in run.records:
        for entry in record.stages:
            if entry.kind in REORDERING_KINDS:
                seen[entry.stage] += 1
                unchanged[entry.stage] += entry.passthrough
    return [f"{run.label}: {stage} for {unchanged[stage]} of {count} questions"
            for stage, count in seen.items() if unchanged[stage] * 2 >= count]


def deviation_notes(runs: Sequence[LoadedRun]) -> list[str]:
    """"<run>: <setting> (<why>)" for each run whose settings go beyond what its paper describes
    (``metrics.json``'s ``run.deviations``; runs written before it was recorded have none)."""
    return [f"{run.label}: {'; '.join(f'{key} ({why})' for key, why in deviations.items())}"
            for run in runs if (deviations := run.metrics.run.deviations)]


def n_group_label(run: LoadedRun) -> str:
    """What a run is apart from its N: method, model, the settings that matter and the retriever."""
    r = run.metrics.run
    shown = {key: value for key, value in r.settings.items()
             if key in ("k", "judge_n", "window") or (key == "fusion_alpha" and value)}
    label = " ".join([r.method, r.model, *(f"{key}={value}" for key, value in shown.items())])
    return label + (f" {r.retriever}" if r.retriever != "bm25" else "")


def n_groups(runs: Sequence[LoadedRun]) -> dict[str, list[plots.NPoint]]:
    """Runs that differ only in N, grouped (RankRAG Fig. 5); groups with one N are left out."""
    groups: dict[str, dict[int, plots.NPoint]] = defaultdict(dict)
    for run in runs:
        n = int(run.metrics.run.settings["n"])
        answer, efficiency = run.metrics.answer, run.metrics.efficiency
        groups[n_group_label(run)][n] = plots.NPoint(n, answer.em, answer.accuracy,
                                                     efficiency.overhead_ratio if efficiency else None)
    return {label: list(points.values()) for label, points in groups.items() if len(points) > 1}


def overhead_table(runs: Sequence[LoadedRun]) -> str | None:
    """RankRAG §5.5 / Fig. 5 as a table: for runs that differ only in N, EM beside the time overhead of
    reranking N·t2 / (t1 + t3) (§4.3; :mod:`.efficiency`). None when no two runs differ only in N."""
    groups: dict[str, list[LoadedRun]] = defaultdict(list)
    for run in runs:
        if run.metrics.efficiency:
            groups[n_group_label(run)].append(run)
    header = ["runs", "N", "EM", "Acc.", "t1 s/q", "N·t2 s/q", "t3 s/q", "overhead"]
    rows = []
    for label, members in groups.items():
        if len({int(run.metrics.run.settings["n"]) for run in members}) < 2:
            continue
        for number, run in enumerate(sorted(members, key=lambda r: int(r.metrics.run.settings["n"]))):
            eff, answer = run.metrics.efficiency, run.metrics.answer
            assert eff is not None  # grouped only with it
            ratio = eff.overhead_ratio
            rows.append([label if number == 0 else "", str(run.metrics.run.settings["n"]), pct(answer.em),
                         pct(answer.accuracy), num(eff.retrieval_seconds, 3), num(eff.reranking_seconds, 2),
                         num(eff.generation_seconds, 2), "–" if ratio is None else f"{ratio:.2f}x"])
    return md_table(header, rows) if rows else None


def reproducing_command(run: LoadedRun) -> str:
    """The command line behind the run's answers as they stand: the last session's, since a resumed run
    may have raised ``--limit``. For runs whose sessions did not yet keep their command, the first command
    and the limit the answers reached."""
    sessions = run.config.get("sessions") or [{}]
    if sessions[-1].get("command"):
        return f"`{' '.join(sessions[-1]['command'])}`"
    command = f"`{' '.join(run.config.get('command', [])) or '(not recorded)'}`"
    if sessions[0].get("limit") != sessions[-1].get("limit"):
        command += f" (its first session; a later one raised it to `--limit {sessions[-1].get('limit')}`)"
    return command


def judge_plot(run: LoadedRun, question_id: str, path: Path) -> Path | None:
    record = next((r for r in run.records if r.id == question_id), None)
    if record is None:
        return None
    judge, bar = record.stage("judge"), record.stage("adaptive_bar")
    if judge is None or bar is None or judge.judge_scores is None or not judge.ids:
        return None
    tau, mean = bar.detail("tau"), bar.detail("mean")
    if not isinstance(tau, (int, float)):
        return None  # no τ recorded: no bar to draw
    scores = judge.judge_scores
    ids = list(scores)
    holding = {judge.ids[rank - 1] for rank in judge.answer_ranks}
    kept = set(bar.ids)
    return plots.plot_judge_scores(
        path, question=record.question, ids=ids, scores=[scores[i] for i in ids],
        kept=[i in kept for i in ids], holds_answer=[i in holding for i in ids], tau=float(tau),
        mean=float(tau) if mean is None else float(mean),
        judge_n=float(run.metrics.run.settings.get("judge_n", 0)), run_label=run.label)


# --- the report: a list of sections ----------------------------------------------------------------------

@dataclass
class Report:
    """What every section of one report reads: the runs (with their first-stage baselines), the plots
    drawn beside it, the price table and the folders left out."""

    runs: list[LoadedRun]
    out: Path
    title: str = "Evaluation report"
    prices: PriceTable | None = None
    empty: list[str] = field(default_factory=list)  # folders with no answered question yet
    images: list[tuple[str, Path]] = field(default_factory=list)  # (caption, PNG) of the plots drawn
    bases: list[Baseline] = field(init=False)  # the first-stage rows, one per question set
    by_run: dict[Path, Baseline] = field(init=False)

    def __post_init__(self) -> None:
        self.bases, self.by_run = baselines(self.runs)


def overview_section(report: Report) -> str:
    """The title, what the measures mean, and the notes a reader must not miss."""
    runs = report.runs
    question_sets = {run.question_ids for run in runs}
    notes = [f"{len(runs)} run(s) on {len(question_sets)} question set(s). Accuracy: a gold answer appears in the "
             "generation (SQuAD-normalised); EM and F1: SQuAD v1.1. Answer Recall@k: share of questions with a "
             "passage holding a gold answer (DPR matching) in the top k of that list. Cost columns are per "
             "question; cached LLM calls cost no model time."]
    if len(question_sets) > 1:
        notes.append("The runs answered different questions: compare each run with the first-stage row of its "
                     "question set.")
    cached = [run.label for run in runs if run.metrics.cost.cache_hits]
    if cached:
        notes.append(f"Some LLM answers came from the call cache in: {'; '.join(cached)}. Their cost columns "
                     "count only the calls that reached the model; \"Cost had nothing been cached\" below adds "
                     "the cache hits at the price they had when first asked. Time runs with `--no-cache` "
                     "(docs/evaluation.md).")
    departed = deviation_notes(runs)
    if departed:
        notes.append(f"Not the papers' methods (settings beyond what the papers describe): {' — '.join(departed)}.")
    idle = [note for run in runs for note in unchanged_stages(run)]
    if idle:
        notes.append(f"Reranking stages that handed back the order they were given (the lists below "
                     f"omit a stage that did so for every question): {'; '.join(idle)}.")
    if report.empty:
        notes.append(f"Left out (no answered question yet): {', '.join(report.empty)}")
    return "\n\n".join([f"# {report.title}", *notes])


def answers_section(report: Report) -> str:
    return f"## Answers and cost\n\n{answers_table(report.runs, report.bases, report.by_run)}"


def uncached_section(report: Report) -> str | None:
    table = uncached_cost_table(report.runs)
    if table is None:
        return None
    return ("### Cost had nothing been cached\n\nCalls that reached the model plus the cache hits, each at the "
            "tokens and model seconds of its first asking (\"not recorded\": the run's answers predate this "
            f"count).\n\n{table}")


def model_cost_section(report: Report) -> str | None:
    split = model_cost_table(report.runs, report.prices)
    if split is None:
        return None
    table, notes = split
    priced = f" at the prices of `{report.prices.path}` (USD per million tokens)" if report.prices else ""
    text = ("### Cost per model and role (GAR-meets-RAG App. B)\n\n"
            f"Calls and tokens per question that reached each model, and each agent role's share{priced}; "
            "role `default` is the method's own model (the reader, RankRAG's reranker, MAIN-RAG's "
            f"Agent-1). The model rows sum to the run's cost above, and so do the role rows.\n\n{table}")
    return text + ("\n\n" + "\n".join(f"- {note}" for note in notes) if notes else "")


def recall_section(report: Report) -> str:
    return ("## Answer Recall@k of every list (RankRAG Tables 6 and 8)\n\n"
            + recall_table(report.runs, report.bases, report.by_run))


def paired_section(report: Report) -> str | None:
    table = paired_table(report.runs)
    if table is None:
        return None
    return ("## Against plain RAG, question by question\n\n"
            "Each run against a vanilla run that answered all its questions (on those questions only, when the "
            "vanilla run answered more): wins, losses and ties in accuracy; "
            "for accuracy, EM and F1 the mean difference in points with a paired bootstrap 95% interval and "
            "the exact two-sided sign test (McNemar's for accuracy and EM). An interval that spans 0 is not a "
            f"measured gain.\n\n{table}")


def overhead_section(report: Report) -> str | None:
    table = overhead_table(report.runs)
    if table is None:
        return None
    return ("## Time overhead of reranking against N (RankRAG §5.5, Fig. 5)\n\n"
            "Per question: t1 the retrieval's wall seconds, N·t2 the model seconds of the LLM calls before "
            "generation (RankRAG's N P(\"True\") calls), t3 those of generation; the overhead is "
            "N·t2 / (t1 + t3) as RankRAG §4.3 defines it. Calls served from the call cache count at the "
            "seconds measured when first made, so runs that shared calls (`winnow eval --sweep n=…`) "
            f"report what each would have cost alone.\n\n{table}")


def qrels_section(report: Report) -> str | None:
    if not any(run.metrics.qrels for run in report.runs):
        return None
    return "## Relevance judgements (qrels, ir-measures)\n\n" + qrels_table(report.runs, report.bases, report.by_run)


def plots_section(report: Report) -> str:
    return "\n\n".join(["## Plots", *(f"![{caption}]({plots.relative(png, report.out.parent)})\n\n*{caption}.*"
                                       for caption, png in report.images)])


def runs_section(report: Report) -> str:
    """Each run's folder, index (absolute path and content address), models (with checksums), versions
    and the command that reproduces it."""
    lines = []
    for run in report.runs:
        models = run.config.get("models", {})
        sha = ", ".join(f"{model.get('model')} sha256 {str(model.get('sha256', ''))[:12]}…"
                        for model in models.values()) or "–"
        versions = run.config.get("versions", {})
        lines += [f"- `{run.path.resolve()}` — {run.label}; {index_description(run)}; models: {sha}; "
                  f"winnow {versions.get('winnow', '?')}, llama.cpp (xllamacpp) {versions.get('xllamacpp', '?')}",
                  f"  {reproducing_command(run)}"]
    return "\n".join(["## Runs", "", *lines])


def index_address(run: LoadedRun) -> str:
    """The index's content address: sha256 of what was indexed and how (the run's index identity, the
    same for a moved or rebuilt copy of the same index), first 12 hex digits; "" where none is recorded."""
    import hashlib
    import json

    identity = (run.config.get("identity") or {}).get("index")
    if not identity:
        return ""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode("utf-8")).hexdigest()[:12]


def index_description(run: LoadedRun) -> str:
    """``index /abs/path (content sha256 1a2b…, 10,033 passages)`` for the run list."""
    identity = (run.config.get("identity") or {}).get("index") or {}
    passages = (identity.get("counts") or {}).get("passages")
    details = [f"content sha256 {address}…" for address in [index_address(run)] if address]
    details += [f"{passages:,} passages"] if isinstance(passages, int) else []
    where = run.config.get("index_dir") or "?"
    return f"index `{where}`" + (f" ({', '.join(details)})" if details else "")


#: The report, section by section: each returns its Markdown, or None when it has nothing to show.
SECTIONS: tuple[Callable[[Report], str | None], ...] = (
    overview_section, answers_section, uncached_section, model_cost_section, recall_section, paired_section,
    overhead_section, qrels_section, plots_section, runs_section)


def draw_plots(report: Report, question: str | None) -> None:
    """Draw the report's PNGs beside it and list them in ``report.images``: answer recall before and
    after reranking, EM and overhead against N (RankRAG Fig. 5), and MAIN-RAG's judge scores."""
    runs, out = report.runs, report.out
    # A run without a reranking list (vanilla) would only repeat its first stage's top k.
    curves = [(f"{run.label} · {after_reranking_row(run.metrics)}",
               run.metrics.answer_recall[after_reranking_row(run.metrics)])
              for run in runs if after_reranking_row(run.metrics) != "final"]
    recall_png = out.with_name(f"{out.stem}-answer-recall.png")
    plots.plot_answer_recall(recall_png, [(b.label, b.run.metrics.answer_recall["first_stage"])
                                          for b in report.bases], curves)
    report.images.append(("Answer Recall@k before and after reranking", recall_png))

    groups = n_groups(runs)
    if groups:
        n_png = out.with_name(f"{out.stem}-accuracy-time-vs-n.png")
        plots.plot_n_tradeoff(n_png, groups)
        report.images.append(("EM, accuracy and the time overhead of reranking against N (RankRAG Fig. 5)", n_png))

    mainrag = [run for run in runs if run.metrics.run.method == "mainrag"]
    if question is not None and not any(question in run.question_ids for run in mainrag):
        raise WinnowError(f"--question {question!r} is not an answered question of any MAIN-RAG run given",
                          "pick an id from a mainrag run's answers.jsonl")
    for run in mainrag:
        chosen = question if question is not None else run.records[0].id
        png = out.with_name(f"{out.stem}-judge-{slug(run.path.name)}-{slug(chosen)}.png")
        if judge_plot(run, chosen, png):
            report.images.append((f"MAIN-RAG judge scores and adaptive bar, question {chosen} ({run.label})", png))


def write_report(run_dirs: Sequence[str | Path], out: str | Path, *, question: str | None = None,
                 title: str = "Evaluation report", prices: PriceTable | None = None,
                 fmt: str = "markdown") -> dict[str, Any]:
    """Write the Markdown report ``out`` (the :data:`SECTIONS` joined) and its PNGs beside it; return
    what was written. A price table (``--prices``) adds the cost in USD per model and per run; ``fmt``
    csv or latex also writes the tables so (:mod:`.export`)."""
    from .export import FORMATS, export

    if fmt not in FORMATS:
        raise WinnowError(f"--format {fmt!r} is not one of {', '.join(FORMATS)}", "e.g. --format latex")
    out = Path(out).expanduser()
    if out.suffix.lower() != ".md":
        raise WinnowError(f"--out {out} must end in .md", "the plots are written beside it as PNG files")
    runs = [load_run(path) for path in with_sweeps_opened(run_dirs)]
    empty = [str(run.path) for run in runs if not run.records]
    runs = [run for run in runs if run.records]
    if not runs:
        raise WinnowError("none of the runs has an answered question yet", "let `winnow eval` finish a question first")
    distinguish_labels(runs)
    make_parent(out)
    report = Report(runs, out, title=title, prices=prices, empty=empty)
    draw_plots(report, question)
    sections = [text for section in SECTIONS if (text := section(report))]
    markdown = "\n\n".join(sections).rstrip() + "\n"
    write_text(out, markdown)
    tables = [str(path) for path in export(markdown, out, fmt, title)]
    return {"report": str(out), "images": [str(png) for _, png in report.images], "runs": len(runs), "skipped": empty,
            "tables": tables}
