"""An evaluation run's state: the chosen questions, the run folder and what each question came to.

An engine (:mod:`.engines`) asks the questions and hands each outcome here (:meth:`EvalRun.keep`,
:meth:`EvalRun.failed`); the rest is owned elsewhere and only called from here: a question's record
(:mod:`.answering`), the run's identity (:mod:`.identity`), its label and deviations
(:mod:`.labels`), the qrels and their coverage of the index (:mod:`.qrels_coverage`), the folder and
its TREC run files (:mod:`.runfolder`), the metrics (:mod:`.metrics`).

The loop is built to be stopped: each finished question is made durable in ``answers.jsonl`` as it
finishes (:mod:`.runfolder`), the chosen questions are a pure function of the question file,
the seed and the limit, and a rerun asks only what is missing. With nothing missing no model is
loaded: the metrics, run files and config are simply rewritten (add ``--qrels`` later this way).

Choosing questions: without a seed, the first L in file order; with a seed, the questions ordered
by sha256(seed, id), then the first L. That order does not depend on L, so raising ``--limit``
later extends the same run with more questions instead of starting a different sample.
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..atomic import write_json
from ..errors import WinnowError
from ..extras import require
from ..lock import output_lock
from .answering import first_stage_depth, model_identities, token_counting
from .identity import run_identity
from .labels import resolved_settings, run_deviations, run_label
from .metrics import cited_accuracy, compute_metrics
from .qrels_coverage import read_run_qrels
from .run_files import RunFiles
from .runfolder import RunFolder, library_versions, now
from .schema import Metrics, QuestionRecord, RunInfo

if TYPE_CHECKING:
    from ..datasets.qa import QAItem
    from ..pipeline import Pipeline
    from ..run_spec import RunSpec
    from .prices import PriceTable

# A question the backend refuses (a prompt longer than the context, a server error) is recorded in
# errors.jsonl and skipped, to be retried on the next resume; this many in a row means the backend
# itself is down, and the run stops rather than burn through the list.
MAX_CONSECUTIVE_FAILURES = 3


def select_questions(items: Sequence[QAItem], *, limit: int | None, seed: int | None) -> list[QAItem]:
    """The questions to ask, in the order to ask them (see the module notes)."""
    chosen = list(items)
    if seed is not None:
        chosen.sort(key=lambda item: hashlib.sha256(f"{seed}\0{item.id}".encode()).hexdigest())
    return chosen if limit is None else chosen[:limit]


#: The longest a written record waits for its fsync while questions flow (see ``keep_outcomes``).
FSYNC_SECONDS = 0.25


@dataclass
class EvalRun:
    """One ``winnow eval`` invocation: a spec, the questions and the folder to write."""

    spec: RunSpec
    index_dir: Path
    queries: Path
    out: Path
    limit: int | None = None
    seed: int | None = None
    qrels: Path | None = None
    capped: bool = False
    relevance_level: int | None = None  # trec_eval's -l; None: the dataset's (retrieval.default_relevance_level)
    api_key: str = ""
    cache: bool = True
    prices: PriceTable | None = None  # a PriceTable (``--prices``): the cost in USD in metrics.json
    command: list[str] = field(default_factory=lambda: ["winnow", *sys.argv[1:]])

    def __post_init__(self) -> None:
        if self.limit is not None and self.limit < 1:
            raise WinnowError(f"--limit must be at least 1 (got {self.limit})")
        if self.qrels is not None:  # checked now, not after the last question has been asked
            require("eval", "qrels metrics (winnow eval --qrels)")
        if self.relevance_level is not None and self.relevance_level < 1:
            raise WinnowError(f"--relevance-level must be at least 1 (got {self.relevance_level})",
                              "TREC DL counts grade 2 and up as relevant (--relevance-level 2); binary qrels use 1")
        self.folder = RunFolder(self.out)
        self._lock = ExitStack()  # the run folder's lock, from prepare() to the end of finish()
        self.items: list[QAItem] = []
        self.selected: list[QAItem] = []
        self.records: dict[str, QuestionRecord] = {}
        self.run_files = RunFiles(self.folder.runs_path, self.spec.method)
        self.metrics: Metrics | None = None  # set by finish()
        self.config: dict[str, Any] = {}
        self.new_answers = 0
        self.failures: dict[str, str] = {}  # this session's skipped questions: id -> error
        self._in_a_row = 0  # questions failed since the last answered one
        self._last_fsync = time.monotonic()  # when the folder was last made durable (keep_outcomes)
        self.token_counting: dict[str, str] = {}  # model role -> "exact: …" or "estimated …: why"
        self.started = time.perf_counter()
        self.run_files_error = ""  # why finish() could not write the TREC run files, if it could not

    # --- preparing --------------------------------------------------------------------------------

    def prepare(self) -> list[QAItem]:
        """Read the questions, lock and open (or resume) the folder; return the questions still to ask.

        A second ``winnow eval`` on the same folder is refused while this one runs: two writers
        would append duplicate answers and pay for every question twice.
        """
        from ..datasets import read_qa_jsonl

        self.items = read_qa_jsonl(self.queries)
        if not self.items:
            raise WinnowError(f"{self.queries} holds no questions")
        self.selected = select_questions(self.items, limit=self.limit, seed=self.seed)
        identity = run_identity(self.spec, self.queries, self.items, self.index_dir, self.seed)
        info = {"queries_file": str(Path(self.queries).resolve()), "index_dir": str(Path(self.index_dir).resolve()),
                "versions": library_versions(), "command": self.command}
        from ..methods import method_settings

        self._lock.enter_context(output_lock(self.out))
        self.config = self.folder.open(identity, info, setting_defaults=method_settings(self.spec.method).to_dict())
        self.records = self.folder.read_answers()
        return [item for item in self.selected if item.id not in self.records]

    def check_models(self, pipeline: Pipeline) -> None:
        """Record the loaded models' identities (with checksums), or refuse ones that changed, and
        how each counts tokens (written with the session: an estimate cuts passages shorter)."""
        self.check_model_identities(model_identities(pipeline))
        self.token_counting = token_counting(pipeline)

    def check_model_identities(self, models: dict[str, Any]) -> None:
        """:meth:`check_models` for models loaded elsewhere (the workers of ``--engine ray``)."""
        recorded = self.config.get("models")
        if recorded and recorded != models:
            from .runfolder import identity_differences

            raise WinnowError(f"{self.out}: the model files differ from the ones this run started with: "
                              f"{'; '.join(identity_differences(recorded, models))}",
                              "use the original model files to resume, or give a new --out folder")
        self.config["models"] = models

    def start_session(self, pending: int) -> None:
        """Record a session of asking ``pending`` questions in ``config.json`` (its command, versions
        and how the models count tokens); the count of failures in a row starts again."""
        self._in_a_row = 0
        self._last_fsync = time.monotonic()
        self.config.setdefault("sessions", []).append(
            {"started": now(), "limit": self.limit, "pending": pending, "command": self.command,
             "versions": library_versions(),
             **({"token_counting": self.token_counting} if self.token_counting else {})})
        self.folder.write_config(self.config)

    # --- asking ------------------------------------------------------------------------------------

    def keep_outcomes(self, outcomes: Sequence[QuestionRecord | tuple[str, str]],
                      on_answer: Callable[[QuestionRecord], None] | None = None,
                      on_failure: Callable[[str, str], None] | None = None) -> None:
        """Keep questions that finished together: each record (:meth:`keep`) or ``(id, error)``
        (:meth:`failed`). They are written at once (a crash of the process loses nothing) and made
        durable against a crash of the machine at most FSYNC_SECONDS later: an fsync costs the
        recording thread about 9 ms, while a fast server finishes three questions."""
        try:
            for outcome in outcomes:
                if isinstance(outcome, QuestionRecord):
                    self.keep(outcome, on_answer, durable=False)
                else:
                    self.failed(*outcome, on_failure)
        finally:
            now = time.monotonic()
            due = now - self._last_fsync >= FSYNC_SECONDS
            self.folder.sync(fsync=due)
            if due:
                self._last_fsync = now

    def keep(self, record: QuestionRecord, on_answer: Callable[[QuestionRecord], None] | None = None, *,
             durable: bool = True) -> bool:
        """Append one finished question to the run folder; False (and nothing written) for a
        question the folder already holds, so no question is ever recorded twice. ``durable=False``
        leaves the fsync to the caller (``self.folder.sync()``), for records that finished together."""
        if record.id in self.records:
            return False
        self._in_a_row = 0
        self.folder.append(record, durable=durable)
        self.records[record.id] = record
        self.run_files.add(record)  # its TREC lines made now, while the server is busy, not after the last call
        self.new_answers += 1
        if on_answer:
            on_answer(record)
        return True

    def failed(self, question_id: str, error: str, on_failure: Callable[[str, str], None] | None = None, *,
               backend: bool = True) -> None:
        """Record a question that failed (retried on resume). Too many refused by the backend in a
        row stop the run; ``backend=False`` is a failure that says nothing of the backend (a lost worker)."""
        self._in_a_row += backend
        self.failures[question_id] = error
        self.folder.append_error({"id": question_id, "error": error, "at": now()})
        if on_failure:
            on_failure(question_id, error)
        if self._in_a_row >= MAX_CONSECUTIVE_FAILURES:
            raise WinnowError(f"the backend failed {self._in_a_row} questions in a row; last: {error}",
                              "fix the backend and run the same command again to resume")

    # --- scoring -----------------------------------------------------------------------------------

    def answered(self) -> list[QuestionRecord]:
        """Records of the chosen questions, in the order they were chosen."""
        return [self.records[item.id] for item in self.selected if item.id in self.records]

    def unanswered(self) -> list[str]:
        """Ids of the chosen questions the folder holds no answer for, in the order they were chosen."""
        return [item.id for item in self.selected if item.id not in self.records]

    def unanswered_note(self, shown: int = 5) -> str:
        """"" when every chosen question is answered; else how many remain, the first few ids and why
        (each distinct error of this session with its count, and those never asked)."""
        missing = self.unanswered()
        if not missing:
            return ""
        ids = ", ".join(missing[:shown]) + (f", … ({len(missing) - shown} more)" if len(missing) > shown else "")
        reasons: dict[str, int] = {}
        for qid in missing:
            why = self.failures.get(qid, "not asked in this session (the run stopped before them)")
            reasons[why] = reasons.get(why, 0) + 1
        why = "; ".join(f"{count} × {reason}" for reason, count in sorted(reasons.items(), key=lambda r: -r[1])[:3])
        return (f"{len(missing)} of {len(self.selected)} question(s) remain unanswered ({ids}): {why}. "
                f"Errors are in {self.folder.errors_path}; run the same command again to retry them")

    def resolved_relevance_level(self) -> int:
        """``--relevance-level``, or the default of the dataset the chosen questions come from (their
        ``metadata["dataset"]``): 2 for TREC DL, else 1."""
        from .retrieval import default_relevance_level

        if self.relevance_level is not None:
            return self.relevance_level
        return default_relevance_level(str(item.metadata.get("dataset", "")) for item in self.selected)

    def finish(self) -> dict[str, Any]:
        """Write ``metrics.json`` and the TREC run files from every finished chosen question; return
        the JSON written (the typed metrics are kept as :attr:`metrics`)."""
        records = self.answered()
        qrels = qrels_info = None
        if self.qrels is not None:
            qrels, qrels_info = read_run_qrels(self.qrels, self.index_dir, [r.id for r in records])
        spec = self.spec
        run = RunInfo(method=spec.method, model=spec.model, backend=spec.backend, retriever=spec.retriever,
                      settings=resolved_settings(spec), queries=str(Path(self.queries).resolve()), seed=self.seed,
                      limit=self.limit, label=run_label(spec), deviations=run_deviations(spec))
        metrics = compute_metrics(records, selected=len(self.selected), run=run, depth=first_stage_depth(spec),
                                  qrels=qrels, qrels_info=qrels_info, capped=self.capped, prices=self.prices,
                                  relevance_level=self.resolved_relevance_level(),
                                  headline=cited_accuracy(spec.profile, (str(item.metadata.get("dataset", ""))
                                                                         for item in self.selected)))
        metrics.questions.failed_this_session = len(self.failures)
        metrics.written = now()
        self.metrics = metrics
        self.folder.close()
        written = metrics.to_json()
        write_json(self.folder.metrics_path, written)
        self.run_files_error = self.run_files.write(records, metrics.rows)
        self.release()
        return written

    def release(self) -> None:
        """Let other writers at the run folder (also done by the operating system when the process ends)."""
        self.folder.close()
        self._lock.close()

    def __enter__(self) -> EvalRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

