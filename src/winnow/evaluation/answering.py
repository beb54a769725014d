"""A question's answer as a run records it: the first stage kept for Recall@k, the method asked, one
``answers.jsonl`` record per question, and a run's questions asked over one pipeline
(:func:`ask_in_process`). Every engine asks through here (:mod:`.engines` in this process,
:mod:`.process_engine`'s client processes, :mod:`.ray_engine`'s workers, a sweep's values), so a
question's record is the same whichever asked it; the models' identities, token counting and
dispatcher statistics are read here too, for the driver to check and report."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import BackendError, WinnowError
from .flow import flow, questions_in_progress, server_capacity
from .labels import resolved_settings
from .record import question_record

if TYPE_CHECKING:
    from ..datasets.qa import QAItem
    from ..llm import LLM
    from ..pipeline import Pipeline
    from ..run_spec import RunSpec
    from .runfolder import RunFolder
    from .schema import QuestionRecord

MIN_FIRST_STAGE_DEPTH = 20  # RankRAG Tables 6 and 8 report answer recall up to R@20
#: Questions a batch for a server when --max-inflight is not given either (the dispatcher's default bound).
SERVER_BATCH_SIZE = 64


class Keeper(Protocol):
    """What asking needs of a run (an :class:`~winnow.evaluation.runner.EvalRun`): its spec, and
    where each question's outcome is kept."""

    @property
    def spec(self) -> RunSpec: ...

    @property
    def folder(self) -> RunFolder: ...

    def keep_outcomes(self, outcomes: Sequence[QuestionRecord | tuple[str, str]],
                      on_answer: Callable[[QuestionRecord], None] | None = None,
                      on_failure: Callable[[str, str], None] | None = None) -> None: ...


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


def asking_note(spec: RunSpec, batch_size: int | None) -> str:
    """How one process asks a run's questions, for the run's first line: against servers they flow
    (:mod:`.flow`), a model in process takes them in batches (:func:`default_batch_size`)."""
    if spec.backend == "openai":
        cap = f", at most {batch_size} at once (--batch-size)" if batch_size else ""
        return f" as they flow through the stages{cap}"
    return f" in batches of {batch_size or default_batch_size(spec.backend, spec.slots, spec.max_inflight)}"


def ask_in_process(run: Keeper, pipeline: Pipeline, pending: Sequence[QAItem],
                   on_answer: Callable[[QuestionRecord], None] | None = None,
                   on_failure: Callable[[str, str], None] | None = None, *, batch_size: int | None = None) -> None:
    """Ask the pending questions over ``pipeline`` in this process, each kept by ``run`` the moment it is done.

    Against model servers (every model takes concurrent callers) the questions flow
    (:mod:`.flow`): each is asked on its own by the one-question path, as many in progress as
    keep the servers' ``--max-inflight`` slots full (``batch_size``, when given, caps them), its
    next stage starting when its own calls return; records are written here, on the calling
    thread, as questions finish.

    A model in process (llama.cpp, transformers) is asked ``batch_size`` questions at a time
    (default :func:`~winnow.evaluation.answering.default_batch_size`), each stage over the whole
    batch, one batch after the other (it decodes a batch's sequences together). A batch the backend
    fails is asked again one question at a time, so one bad question costs only itself (its calls
    that succeeded are in the call cache). Either way each question's record is what it alone would give.
    """
    if batch_size is not None and batch_size < 1:
        raise WinnowError(f"--batch-size must be at least 1 (got {batch_size})")
    spec = run.spec

    def keep(outcomes: list[QuestionRecord | tuple[str, str]]) -> None:
        run.keep_outcomes(outcomes, on_answer, on_failure)

    try:
        capacity = server_capacity(pipeline)
        if capacity is not None:
            flow(pending, lambda item: answered_batch(pipeline, spec, [item]),
                 workers=questions_in_progress(capacity, batch_size), keep=keep)
            return
        size = batch_size or default_batch_size(spec.backend, spec.slots, spec.max_inflight)
        for start in range(0, len(pending), size):
            keep(list(answer_batch(pipeline, spec, pending[start:start + size])))
    finally:
        run.folder.sync()


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


def merged_dispatch_stats(found: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The dispatchers' statistics of several processes or Ray workers (:meth:`Dispatcher.stats`):
    counts summed, an endpoint open when any of them has it open."""
    merged: dict[str, Any] = {"calls": 0, "retries": 0, "failovers": 0, "hedges": 0, "hedges_won": 0,
                              "endpoints": {}}
    for stats in found:
        for key in ("calls", "retries", "failovers", "hedges", "hedges_won"):
            merged[key] += stats[key]
        for url, endpoint in stats["endpoints"].items():
            into = merged["endpoints"].setdefault(url, {})
            for key, value in endpoint.items():
                into[key] = (into.get(key, False) or value) if isinstance(value, bool) else into.get(key, 0) + value
    return merged


def llm_meter(llms: Sequence[LLM]) -> tuple[int, int]:
    """(calls in flight, tokens answered so far) over a pipeline's models."""
    return sum(llm.inflight for llm in llms), sum(llm.tokens_done for llm in llms)


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
