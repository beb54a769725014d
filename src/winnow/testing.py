"""Conformance checks every registered method and stage must pass: a base test class and its checks.

After PyTerrier's ``TransformerTestCase`` (a base test case a transformer's own tests subclass to get
the framework's checks): subclass :class:`MethodContract` and give it three pytest fixtures, and the
method gets the checks every method of :data:`winnow.methods.METHODS` gets::

    @pytest.fixture(params=list(METHODS))          # or one name: a method of your own, registered
    def contract_method(request): return request.param
    @pytest.fixture
    def contract_index(index): return index          # a SearchIndex the questions find passages in
    @pytest.fixture
    def contract_backend(llama_backend): return llama_backend   # a real model backend

    class TestMyMethod(MethodContract):
        pytestmark = pytest.mark.llm

The method runs with its settings type's :meth:`~winnow.methods.base.MethodSettings.contract_run`
values (small, so the run takes seconds). What is checked:

* **The Stage contract** (docs/architecture.md, "The Stage contract"), stage by stage along the
  recipe: each question gets one :class:`~winnow.records.StageTrace` per stage run (a composite step,
  RRR's loop, several), recording the batch it ran with; the record's details are the typed record of
  its kind (:mod:`winnow.details`); every rank is 1-based and the ranks a stage gave are distinct
  places in the list it ranked; and the stage moves each question on exactly as it does that
  question alone.
* **The method contract**: ``ask`` answers as the batch does (answers, passages, every stage's
  scores and LLM calls); every trace records the recipe; the settings come back unchanged through
  the resolver and JSON; every stage that calls a model calls its agent role's (``stage_roles``,
  ``roles``), an unknown role is refused, and every leaf of the recipe is a
  :class:`~winnow.stages.Stage`.

Each check wraps the backend in an LLM behind one call cache in memory per backend (:func:`contract_llm`),
shared by the checks: a prompt is answered by the model once, the first time any check sends it, and
given back to every later one. So the batch really asks the model (or a check before it did, with the
same prompt), and a question run alone afterwards gets the model's answers back for the prompts it
shares with the batch: a prompt the method builds differently alone misses the cache and is asked.
What is compared is the method's part: the prompts it builds (every call's messages are compared), the
calls it needs and what it makes of the answers. Whether the backend itself answers a prompt alike in
a batch and alone is the backend's own test (tests/test_slots.py); without the cache each check paid
for its model calls again, the largest cost in the suite.

The checks are functions too (``check_*``), for a caller without pytest; each raises
:class:`ContractError` naming the method, stage and question at fault.
"""

from __future__ import annotations

import copy
import json
import weakref
from typing import Any, Iterator, Sequence

from .details import DETAILS_BY_KIND
from .errors import WinnowError
from .llm.cache import CallCache
from .llm.client import LLM
from .methods import METHODS, Method, MethodSettings, build_method, resolve_settings
from .records import Answer, Query, StageTrace, Usage
from .settings import SettingsLayer
from .stages import Stage, label
from .stages.contract import QuestionState
from .stages.retrieve import SearchIndex

#: Two questions the test corpus (tests/small_corpus.py) answers, one passage each.
QUESTIONS = ("what is the capital of france", "who painted the mona lisa")


class ContractError(AssertionError):
    """A method or stage that breaks its contract; the message names which, and how."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ContractError(message)


def contract_settings(method: str) -> MethodSettings:
    """The settings ``method`` is checked with: its settings type's ``contract_run`` values, resolved."""
    settings_type = METHODS[method].Settings
    own = settings_type.field_types()
    values = {key: value for key, value in settings_type.contract_run().items() if key in own}
    return resolve_settings(method, [SettingsLayer("contract run", values)]).settings


#: The contract checks' call cache of each backend (in memory; gone with the backend).
_CONTRACT_CACHES: weakref.WeakKeyDictionary[Any, CallCache] = weakref.WeakKeyDictionary()


def contract_llm(backend: Any) -> LLM:
    """``backend`` behind the call cache in memory the contract checks share for it: see the module notes."""
    try:
        cache = _CONTRACT_CACHES.get(backend)
        if cache is None:
            cache = _CONTRACT_CACHES[backend] = CallCache(":memory:")
    except TypeError:  # a backend that cannot be a weak key (unhashable, or no weak references): its own
        cache = CallCache(":memory:")
    return LLM(backend, cache=cache)


def build_for_contract(method: str, index: SearchIndex, llm: LLM, **given: Any) -> Method:
    """``method`` with its contract settings over ``index`` and ``llm`` (``given``: agents, rerankers)."""
    return build_method(method, index=index, llm=llm, **{**contract_settings(method).to_dict(), **given})


def leaves(step: Any) -> Iterator[Any]:
    """The stages a recipe step is made of: a recipe's (or a loop's) steps, recursively, else the step."""
    inner = getattr(step, "steps", None)
    if inner is None:
        yield step
        return
    for part in inner:
        yield from leaves(part)


def model_answers(usage: Usage) -> int:
    """The model answers a question or stage needed: asked, or given back by the call cache."""
    return usage.calls + usage.cache_hits


def stage_view(stage: StageTrace) -> tuple[Any, ...]:
    """What must not depend on the batch: name, kind, the list and scores it left, its calls and their answers."""
    return (stage.name, stage.kind, stage.settings, [c["id"] for c in stage.output],
            [round(c["score"], 4) for c in stage.output],
            [(c.kind, c.messages, c.output if c.kind == "generate" else None) for c in stage.llm_calls],
            model_answers(stage.usage))


def state_view(state: QuestionState) -> tuple[Any, ...]:
    return ([c.passage.id for c in state.ranked], [round(c.score, 4) for c in state.ranked],
            state.answer.text if state.answer else None, state.search_text, state.done,
            [stage_view(stage) for stage in state.trace.stages])


def check_stage_record(stage: StageTrace, where: str) -> None:
    """One StageTrace: the details record of its kind; every rank 1-based, and the ranks the stage gave
    distinct places in the list it ranked (a scorer may pass the list on in its old order: RRR's σ)."""
    record = DETAILS_BY_KIND.get(stage.kind)
    _require(record is not None, f"{where}: stage kind {stage.kind!r} has no details record: add one to "
                                 "winnow/details.py (or reuse a kind that has one)")
    _require(type(stage.details) is record,
             f"{where}: details are {type(stage.details).__name__}, not {record.__name__ if record else '?'}")
    own_ranks = []
    for candidate in stage.output:
        for score in candidate["scores"]:
            _require(score["rank"] >= 1, f"{where}: passage {candidate['id']} has rank {score['rank']} from "
                                         f"{score['stage']!r}: ranks are 1-based")
        if candidate["scores"] and candidate["scores"][-1]["stage"] == stage.name:
            own_ranks.append(candidate["scores"][-1]["rank"])
    ranked = max(len(stage.input), len(stage.output))
    _require(len(set(own_ranks)) == len(own_ranks) and all(rank <= ranked for rank in own_ranks),
             f"{where}: the ranks it gave ({own_ranks}) are not distinct places among the {ranked} it ranked")


def check_step(step: Any, batch: Sequence[QuestionState], *, method: str = "") -> None:
    """Run ``step`` over ``batch`` (moving it on) and check the Stage contract: a StageTrace per
    question (several for a composite step), the batch size recorded, each record's details and ranks,
    and each question moved on exactly as it is when the step runs on it alone."""
    where = f"method {method!r}, step {label(step)}" if method else f"stage {label(step)}"
    _require(isinstance(step, Stage), f"{where}: not a Stage (a name and run(batch))")
    alone = [copy.deepcopy(state) for state in batch]
    before = [len(state.trace.stages) for state in batch]
    step.run(batch)
    added = [state.trace.stages[count:] for state, count in zip(batch, before, strict=True)]
    composite = getattr(step, "steps", None) is not None
    counts = [len(new) for new in added]
    _require(composite or counts in ([0] * len(batch), [1] * len(batch)),
             f"{where}: {counts} StageTraces for the {len(batch)} questions of the batch, where each gets one "
             "(or, for a step that records nothing, none)")
    for number, (state, new) in enumerate(zip(batch, added, strict=True), start=1):
        at = f"{where}, question {number} ({state.query.text!r})"
        for stage in new:
            _require(stage.batch <= len(batch), f"{at}: recorded a batch of {stage.batch}, ran with {len(batch)}")
            check_stage_record(stage, f"{at}, trace {stage.name!r}")
        if new and not composite:
            _require(new[0].name == step.name and new[0].batch == len(batch),
                     f"{at}: recorded as {new[0].name!r} with batch {new[0].batch}, not {step.name!r} "
                     f"with {len(batch)}")
    for number, (single, state) in enumerate(zip(alone, batch, strict=True), start=1):
        step.run([single])
        _require(state_view(single) == state_view(state),
                 f"{where}, question {number} ({state.query.text!r}): moved on differently alone than in a batch "
                 f"of {len(batch)}")


def check_recipe(method: Method, questions: Sequence[str] = QUESTIONS) -> None:
    """Every step of ``method``'s recipe keeps the Stage contract, over ``questions`` step by step."""
    steps = list(method.recipe)
    _require(bool(steps), f"method {method.name!r} has an empty recipe: compose its stages into self.recipe")
    for leaf in (leaf for step in steps for leaf in leaves(step)):
        _require(isinstance(leaf, Stage), f"method {method.name!r}: {leaf!r} in its recipe is not a Stage")
    batch = [QuestionState(Query(text)) for text in questions]
    for step in steps:
        check_step(step, batch, method=method.name)


def check_batch_independence(method: Method, questions: Sequence[str] = QUESTIONS) -> list[Answer]:
    """``ask_batch(questions)`` answers each question as ``ask`` does alone: answers, passages, every
    stage's view, the calls (more than none); the first stage ran with the whole batch; each trace
    records the recipe. Returns the batch's answers."""
    batched = method.ask_batch(list(questions))
    alone = [method.ask(question) for question in questions]
    for together, single in zip(batched, alone, strict=True):
        at = f"method {method.name!r}, question {single.question!r}"
        _require(together.text == single.text, f"{at}: answered {together.text!r} in a batch, {single.text!r} alone")
        _require([c.passage.id for c in together.passages] == [c.passage.id for c in single.passages],
                 f"{at}: other passages in a batch than alone")
        for mine, its in zip(together.trace.stages, single.trace.stages, strict=False):
            _require(stage_view(mine) == stage_view(its), f"{at}: stage {mine.name!r} differs in a batch")
        _require(len(together.trace.stages) == len(single.trace.stages), f"{at}: other stages in a batch")
        in_batch, alone_needed = model_answers(together.usage), model_answers(single.usage)
        _require(in_batch == alone_needed > 0, f"{at}: {in_batch} calls in a batch, {alone_needed} alone "
                                               "(a model must answer)")
        _require(together.trace.stages[0].batch == len(questions) and single.trace.stages[0].batch == 1,
                 f"{at}: the first stage did not run with the whole batch")
        _require(together.trace.recipe == single.trace.recipe == repr(method.recipe),
                 f"{at}: the trace does not record the recipe {method.recipe!r}")
        for stage in together.trace.stages:
            check_stage_record(stage, f"{at}, stage {stage.name!r}")
    return batched


def check_settings_round_trip(method: str) -> None:
    """The contract settings come back unchanged through JSON and the resolver, and a method built
    with them reports them in its answers' settings."""
    settings = contract_settings(method)
    through_json = json.loads(json.dumps(settings.to_dict()))
    again = resolve_settings(method, [SettingsLayer("round trip", through_json)]).settings
    _require(again == settings, f"method {method!r}: settings {settings} came back as {again}")
    _require(type(settings) is METHODS[method].Settings,
             f"method {method!r}: resolved {type(settings).__name__}, not its Settings type")


def check_roles(method: str, index: SearchIndex, backend: Any) -> None:
    """Each stage that calls a model calls its role's (a model of its own per role), every role a
    stage names is one of the method's, and a role the method lacks is refused."""
    cls = METHODS[method]
    default = LLM(backend)
    agents = {role: LLM(backend) for role in cls.roles}
    built = build_for_contract(method, index, default, agents=agents)
    unknown = set(built.stage_roles.values()) - set(cls.roles)
    _require(not unknown, f"method {method!r}: stage_roles name roles {sorted(unknown)} missing from its roles")
    for leaf in (leaf for step in built.recipe for leaf in leaves(step)):
        inner = getattr(leaf, "inner", leaf)  # a second pass runs its inner re-ranker
        model = getattr(inner, "llm", None)
        if model is None:
            continue
        role = built.stage_roles.get(leaf.name)
        expected = agents[role] if role else default
        _require(model is expected, f"method {method!r}: stage {leaf.name!r} calls "
                                    f"{'the method' if model is default else 'another'} model, not that of role "
                                    f"{role or 'default'!r}")
    try:
        build_for_contract(method, index, default, agents={"no-such-role": default})
    except WinnowError:
        return
    raise ContractError(f"method {method!r} accepted an agent role it does not have")


class MethodContract:
    """The checks every method passes (see the module notes): subclass it in a test module that
    defines the fixtures ``contract_method`` (a registered method's name), ``contract_index`` and
    ``contract_backend`` (a real model backend; the checks share a call cache in memory in front of it)."""

    questions: Sequence[str] = QUESTIONS

    def test_every_step_keeps_the_stage_contract(self, contract_method: str, contract_index: SearchIndex,
                                                 contract_backend: Any) -> None:
        check_recipe(build_for_contract(contract_method, contract_index, contract_llm(contract_backend)),
                     self.questions)

    def test_a_batch_answers_as_each_question_alone(self, contract_method: str, contract_index: SearchIndex,
                                                    contract_backend: Any) -> None:
        check_batch_independence(build_for_contract(contract_method, contract_index, contract_llm(contract_backend)),
                                 self.questions)

    def test_settings_round_trip(self, contract_method: str) -> None:
        check_settings_round_trip(contract_method)

    def test_each_stage_calls_its_roles_model(self, contract_method: str, contract_index: SearchIndex,
                                              contract_backend: Any) -> None:
        check_roles(contract_method, contract_index, contract_backend)
