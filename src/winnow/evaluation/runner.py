"""An evaluation run: ask a method every chosen question, record each as it finishes, score the lot.

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
from collections.abc import Callable, Container, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..atomic import write_json
from ..errors import BackendError, WinnowError
from ..extras import require
from ..index.manifest import file_sha256
from ..lock import output_lock
from .flow import flow, questions_in_progress, server_capacity
from .metrics import compute_metrics
from .qrels_coverage import unknown_documents
from .record import question_record
from .runfolder import RunFolder, library_versions, now
from .schema import Metrics, QuestionRecord, RunInfo

if TYPE_CHECKING:
    from ..datasets.qa import QAItem
    from ..llm import LLM
    from ..pipeline import Pipeline
    from ..run_spec import RunSpec
    from .prices import PriceTable

MIN_FIRST_STAGE_DEPTH = 20  # RankRAG Tables 6 and 8 report answer recall up to R@20
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


def resolved_settings(spec: RunSpec) -> dict[str, Any]:
    """Every setting of the method, defaults included (the spec holds only the overrides)."""
    return dict(spec.method_settings().to_dict())


#: The longest a written record waits for its fsync while questions flow (see ``ask_all``).
FSYNC_SECONDS = 0.25


def first_stage_depth(spec: RunSpec) -> int:
    """How deep the baseline first-stage list goes: the method's N, and at least 20."""
    # Asked once per question: resolving the method's typed settings each time cost about 0.15 ms,
    # a few per cent of a vanilla question's client CPU. The key is what decides N.
    key = (spec.method, repr(sorted(spec.settings.items())))
    depth = _first_stage_depths.get(key)
    if depth is None:
        depth = _first_stage_depths[key] = max(int(resolved_settings(spec).get("n", 0)), MIN_FIRST_STAGE_DEPTH)
    return depth


_first_stage_depths: dict[tuple[str, str], int] = {}


def index_identity(index_dir: Path, retriever: str, ann: str = "") -> dict[str, Any]:
    """What was indexed and how (not where, nor when): moving or rebuilding the same index is fine.
    Of the ANN indexes only the one searched (``ann``) counts: building another does not change a run."""
    from ..index.ann import ANN_KINDS, file_name
    from ..index.manifest import read_manifest

    manifest = read_manifest(Path(index_dir))
    identity = {key: manifest.get(key) for key in ("source_checksum", "source_options", "counts", "bm25")}
    unused = {f"dense/{file_name(kind)}" for kind in ANN_KINDS if kind != ann}
    if retriever != "bm25":
        identity["dense"] = {name: entry.get("sha256") for name, entry in (manifest.get("files") or {}).items()
                             if name.startswith("dense/") and name not in unused}
    return identity


#: Questions a batch for a server when --max-inflight is not given either (the dispatcher's default bound).
SERVER_BATCH_SIZE = 64


def default_batch_size(backend: str, slots: int | None, max_inflight: int | None = None) -> int:
    """Questions per batch when ``--batch-size`` is not given and questions are asked in batches: a
    model in process, and each worker of ``--engine ray`` (in one process a server's questions flow
    instead, :mod:`.flow`).

    llama.cpp in process decodes at most ``slots`` sequences at once (1 by default), so a larger
    batch asks no faster there (docs/benchmarks.md, "Parallel slots on the CPU": 0.99-1.01x) but
    finishes all its questions together at its end, and a run stopped mid-batch loses the whole
    batch's work (16 minutes for 8 MAIN-RAG questions with the 1.5B model on 2 cores). A server
    (``openai``) is kept full by a batch of as many questions as it holds calls (``--max-inflight``,
    64 by default): every stage then has at least that many calls, so one flag sets both
    (docs/benchmarks.md, "Keeping a fast server full"). ``transformers`` gets 8: on a GPU it pads 8
    prompts into one forward pass; on a CPU it runs one prompt at a time.
    """
    if backend == "llama.cpp":
        return slots or 1
    if backend == "openai":
        return max_inflight or SERVER_BATCH_SIZE
    return 8


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
        self.metrics: Metrics | None = None  # set by finish()
        self.config: dict[str, Any] = {}
        self.new_answers = 0
        self.failures: dict[str, str] = {}  # this session's skipped questions: id -> error
        self._in_a_row = 0  # questions failed since the last answered one
        self._last_fsync = time.monotonic()  # when the folder was last made durable (keep_outcomes)
        self.token_counting: dict[str, str] = {}  # model role -> "exact: …" or "estimated …: why"
        self.started = time.perf_counter()

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
        identity = {
            "spec": {key: value for key, value in self.spec.to_dict().items() if key != "settings"},
            "settings": resolved_settings(self.spec),
            "queries": {"sha256": file_sha256(Path(self.queries)), "questions": len(self.items)},
            "index": index_identity(self.index_dir, self.spec.retriever, self.spec.ann),
            "seed": self.seed,
            "first_stage_depth": first_stage_depth(self.spec),
        }
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
        self.config.setdefault("sessions", []).append(
            {"started": now(), "limit": self.limit, "pending": pending, "command": self.command,
             "versions": library_versions(),
             **({"token_counting": self.token_counting} if self.token_counting else {})})
        self.folder.write_config(self.config)

    # --- asking ------------------------------------------------------------------------------------

    def ask_all(self, pipeline: Pipeline, pending: Sequence[QAItem],
                on_answer: Callable[[QuestionRecord], None] | None = None,
                on_failure: Callable[[str, str], None] | None = None, *, batch_size: int | None = None) -> None:
        """Ask the pending questions and append each question's record the moment it is done.

        Against model servers (every model takes concurrent callers) the questions flow
        (:mod:`.flow`): each is asked on its own by the one-question path, as many in progress as
        keep the servers' ``--max-inflight`` slots full (``batch_size``, when given, caps them), its
        next stage starting when its own calls return; records are written here, on the calling
        thread, as questions finish.

        A model in process (llama.cpp, transformers) is asked ``batch_size`` questions at a time
        (default :func:`default_batch_size`), each stage over the whole batch, one batch after the
        other (it decodes a batch's sequences together). A batch the backend fails is asked again
        one question at a time, so one bad question costs only itself (its calls that succeeded are
        in the call cache). Either way each question's record is what it alone would give.
        """
        if batch_size is not None and batch_size < 1:
            raise WinnowError(f"--batch-size must be at least 1 (got {batch_size})")
        self._in_a_row = 0
        self._last_fsync = time.monotonic()

        def handle(outcomes: list[QuestionRecord | tuple[str, str]]) -> None:
            self.keep_outcomes(outcomes, on_answer, on_failure)

        try:
            capacity = server_capacity(pipeline)
            if capacity is not None:
                flow(pending, lambda item: answered_batch(pipeline, self.spec, [item]),
                     workers=questions_in_progress(capacity, batch_size), keep=handle)
                return
            size = batch_size or default_batch_size(self.spec.backend, self.spec.slots, self.spec.max_inflight)
            batches = [pending[start:start + size] for start in range(0, len(pending), size)]
            for batch in batches:
                handle(list(answer_batch(pipeline, self.spec, batch)))
        finally:
            self.folder.sync()

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
        from ..datasets.trec import read_qrels

        records = self.answered()
        qrels = qrels_info = None
        if self.qrels is not None:
            qrels = read_qrels(self.qrels)
            qrels_info = {"file": str(Path(self.qrels).resolve()), "sha256": file_sha256(Path(self.qrels)),
                          "index_coverage": unknown_documents(qrels, indexed_ids(self.index_dir),
                                                              [r.id for r in records])}
        spec = self.spec
        run = RunInfo(method=spec.method, model=spec.model, backend=spec.backend, retriever=spec.retriever,
                      settings=resolved_settings(spec), queries=str(Path(self.queries).resolve()), seed=self.seed,
                      limit=self.limit, label=run_label(spec), deviations=run_deviations(spec))
        metrics = compute_metrics(records, selected=len(self.selected), run=run, depth=first_stage_depth(spec),
                                  qrels=qrels, qrels_info=qrels_info, capped=self.capped, prices=self.prices,
                                  relevance_level=self.resolved_relevance_level())
        metrics.questions.failed_this_session = len(self.failures)
        metrics.written = now()
        self.metrics = metrics
        self.folder.close()
        written = metrics.to_json()
        write_json(self.folder.metrics_path, written)
        self.run_files_error = write_run_files(self.folder.runs_path, records, metrics.rows, spec.method)
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


def model_identities(pipeline: Pipeline) -> dict[str, Any]:
    """The identities (with checksums) of a pipeline's models, as run folders record them."""
    models = {"model": pipeline.llm.identity}
    models.update({f"llm_{i}": llm.identity for i, llm in enumerate(pipeline.llms[1:], start=1)})
    return models


def token_counting(pipeline: Pipeline) -> dict[str, str]:
    """How each of a pipeline's models counts tokens ("exact: …" or "estimated …"), by the names
    :func:`model_identities` gives them."""
    return {name: llm.token_counting for name, llm in zip(model_identities(pipeline), pipeline.llms, strict=True)}


def dispatch_stats(llms: Sequence[LLM]) -> list[dict[str, Any]]:
    """Each server-backed model's dispatcher statistics (:meth:`~winnow.llm.dispatch.Dispatcher.stats`)."""
    return [stats() for llm in llms if (stats := getattr(llm.backend, "dispatch_stats", None)) is not None]


def answered_batch(pipeline: Pipeline, spec: RunSpec,
                   batch: Sequence[QAItem]) -> list[QuestionRecord | tuple[str, str]]:
    """:func:`answer_batch`'s outcomes as a list (a question's unit of :mod:`.flow`)."""
    return list(answer_batch(pipeline, spec, batch))


def answer_batch(pipeline: Pipeline, spec: RunSpec,
                 batch: Sequence[QAItem]) -> Iterator[QuestionRecord | tuple[str, str]]:
    """Ask ``batch`` (QA items) together, each stage over the whole batch (its LLM calls sent at
    once); yield per question its finished record, or ``(id, error)`` when the backend refused it.

    A batch the backend fails is asked again one question at a time, so one bad question costs
    only itself (its calls that succeeded are in the call cache).
    """
    try:
        yield from _records(pipeline, spec, list(batch))
        return
    except BackendError as exc:
        if len(batch) == 1:
            yield batch[0].id, str(exc)
            return
    for item in batch:
        try:
            yield from _records(pipeline, spec, [item])
        except BackendError as exc:
            yield item.id, str(exc)


def _records(pipeline: Pipeline, spec: RunSpec, batch: list[QAItem]) -> list[QuestionRecord]:
    depth = first_stage_depth(spec)
    retriever = pipeline.retriever_name
    started = time.perf_counter()
    first_stages = [pipeline.search(item.query, k=depth) for item in batch]
    searched = time.perf_counter()
    answers = pipeline.ask_batch([item.query for item in batch])
    share = (time.perf_counter() - started) / len(batch)  # each question's part of the batch's wall time
    return [question_record(item, answer, first_stage, retriever=retriever, seconds=share,
                            first_stage_seconds=(searched - started) / len(batch))
            for item, first_stage, answer in zip(batch, first_stages, answers, strict=True)]


def indexed_ids(index_dir: Path) -> Container[str]:
    """The passage ids of the index folder, looked up in its memory-mapped passage store (``id in``
    reads a few pages; nothing is read whole and the BM25 arrays are not loaded)."""
    from ..index.store import open_passage_store

    return open_passage_store(Path(index_dir)).ids


def run_deviations(spec: RunSpec) -> dict[str, str]:
    """The run's settings that make its method something the paper does not describe: setting -> why
    (:meth:`MethodSettings.deviations`, e.g. RRR with ``rerank=pointwise``)."""
    return spec.method_settings().deviations()


def run_label(spec: RunSpec) -> str:
    """"rankrag qwen2.5-coder-1.5b N=10 k=5", plus each agent role given its own model
    ("judge=qwen2.5-coder-1.5b") and every other setting changed from the method's
    defaults ("α=0.5", "listwise_prompt=rankgpt"), so that two different runs never share a label.
    A run from a profile says so ("profile=paper") and lists the settings changed from the profile's;
    a setting that departs from the paper is marked: "rerank=pointwise (not the paper's)"."""
    from ..methods import method_class, method_settings

    settings = resolved_settings(spec)
    profile = spec.profile
    defaults = method_settings(spec.method, profile=profile or None).to_dict()
    deviations = run_deviations(spec)
    parts = [spec.method, spec.model]
    # A role on its own model ("judge=qwen2.5-coder-1.5b") is another run than the same method on one model.
    parts += [f"{role}={model}" for role, model in sorted(spec.agents.items())
              if model and model != spec.model]
    parts += [f"profile={profile}"] if profile else []
    unused = method_class(spec.method).unused_settings  # vanilla retrieves k
    if "n" not in unused:
        parts.append(f"N={settings.get('n')}")
    if "k" not in unused and settings.get("k") is not None:  # MAIN-RAG's k is None: every survivor
        parts.append(f"k={settings.get('k')}")
    for key, value in settings.items():
        if key not in ("n", "k") and value != defaults.get(key):
            parts.append(f"α={value:g}" if key == "fusion_alpha" else f"{key}={value}")
            if key in deviations:
                parts[-1] += " (not the paper's)"
    if spec.retriever != "bm25":
        parts.append(spec.retriever)
    return " ".join(parts)


def write_run_files(folder: Path, records: Sequence[QuestionRecord], rows: Sequence[str], method: str) -> str:
    """``folder/<row>.trec`` for every row; returns "" or why they could not be written (an id with
    white space cannot go in a TREC file), so a finished run is never lost over its run files."""
    from ..datasets.trec import write_run

    try:
        for row in rows:
            run = {}
            for record in records:
                if row == "first_stage":
                    ids = record.first_stage.ids
                elif row == "final":
                    ids = record.final.ids
                else:
                    entry = record.stage(row)
                    if entry is None:
                        continue  # the stage did not run for this question: no line rather than a guess
                    ids = entry.ids
                run[record.id] = [(doc, 0.0) for doc in dict.fromkeys(ids)]
            write_run(run, folder / f"{row}.trec", tag=f"winnow.{method}.{row}", scores_from_rank=True)
    except WinnowError as exc:
        return str(exc)
    return ""
