"""The search: an Optuna study of configurations, measured by successive halving, kept and resumable.

Why Optuna (docs/tuning.md): its multi-objective TPE sampler learns from few trials, its ask-and-tell
interface lets Winnow run its own rungs (its pruners are for one objective), and its storage is a
SQLite file by default or any database URL several machines share, with nothing else to run. Ray
Tune would need a Ray cluster for what one process here does, and keeps a study as files of one
machine.

A trial is one configuration (:mod:`.configuration`). Everything a trial learns is kept in the
study as it is learnt, in the trial's user attributes: its configuration, the rung it is to be
measured on next, and its results on each rung's questions (``rung0``, ``rung1``, …; per-question
quality and cost, :class:`~.measure.Measured`). A trial is told COMPLETE with (quality, cost) over
all tuning questions, PRUNED when halving drops it, FAIL when its settings break a rule between
settings or the backend refuses it. Stopped at any point, ``winnow tune`` run again continues: a
finished trial is never measured again, an unfinished one (its owner process gone) continues from
its last finished rung, and calls already made come back from the call cache.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import os
import random
import socket
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import BackendError, InputError, WinnowError
from ..extras import import_extra
from ..interruption import uninterruptible
from .configuration import Configuration, draw, random_params, reference_params
from .halving import Point, pareto_front, promoted, rung_sizes
from .measure import Measured, joined, measure
from .objectives import Objective
from .space import SearchSpace

if TYPE_CHECKING:
    from ..datasets.qa import QAItem
    from ..evaluation.prices import PriceTable
    from ..llm.client import LLM
    from ..pipeline import Pipeline
    from ..run_spec import RunSpec
    from ..stages.retrieve import SearchIndex

CONDITIONS = "conditions"
#: Trials in a row the backend refuses before the study stops (the backend itself is down).
MAX_BACKEND_FAILURES = 3
#: Drawn configurations the settings' rules may refuse for each one measured before the space is called unusable.
MAX_REFUSED_PER_CONFIGURATION = 20
#: Repeated draws after which a configuration not yet drawn is queued at random.
REPEATS_BEFORE_RANDOM = 3


def optuna_module() -> Any:
    optuna = import_extra("optuna", "tune", "winnow tune")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


@dataclass(frozen=True)
class Plan:
    """How the study searches: the objective and cost, how many configurations, the halving."""

    objective: Objective
    cost: str
    trials: int = 30
    bracket: int = 10
    eta: int = 3
    smallest: int = 5
    confirm: int = 5
    seed: int = 0
    batch_size: int = 8


@dataclass
class Questions:
    """The questions, split once by the seed: tuning (searched on, in rung order) and confirming
    (held out; the chosen configurations are re-measured there)."""

    tuning: list[QAItem]
    confirming: list[QAItem]
    qrels: Mapping[str, Mapping[str, int]] | None = None
    prices: PriceTable | None = None


def split_questions(items: Sequence[QAItem], confirm_share: float, seed: int) -> tuple[list[QAItem], list[QAItem]]:
    """The seeded split: questions ordered by sha256(seed, id) (the order does not depend on which
    other questions there are), the first ``confirm_share`` of them confirming, the rest tuning."""
    ordered = sorted(items, key=lambda item: hashlib.sha256(f"{seed}\0{item.id}".encode()).hexdigest())
    held = round(confirm_share * len(ordered))
    return ordered[held:], ordered[:held]


class Workbench:
    """The index and the loaded models every configuration runs on: a configuration's pipeline is
    built over them (:meth:`Pipeline.from_parts`), so no model loads twice and every call goes
    through the one call cache."""

    def __init__(self, spec: RunSpec, index: SearchIndex, llms: Mapping[str, LLM], index_dir: str = "") -> None:
        self.spec, self.index, self.llms, self.index_dir = spec, index, dict(llms), index_dir
        self.notices: dict[str, None] = {}

    def pipeline(self, configuration: Configuration) -> Pipeline:
        from ..errors import WinnowWarning
        from ..pipeline import Pipeline

        spec = dataclasses.replace(self.spec, method=configuration.method, settings=dict(configuration.settings),
                                   agents=dict(configuration.agents), provenance={})
        agents = {role: self.llms[model] for role, model in configuration.agents.items() if model != spec.model}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", WinnowWarning)  # said once, by the command (notices)
            built = Pipeline.from_parts(spec, self.index, self.llms[spec.model], agents=agents,
                                        index_dir=self.index_dir)
        self.notices.update(dict.fromkeys(built.method.notices))
        return built


class Progress(Protocol):
    """What the study tells the command as it goes (the command draws it)."""

    def trials(self, finished: int, total: int) -> None: ...

    def measuring(self, text: str, questions: int) -> None: ...

    def answered(self, questions: int) -> None: ...

    def note(self, text: str) -> None: ...


@dataclass
class Entry:
    """A trial of this process's bracket: its configuration, its results by rung, the rung it is due on."""

    number: int
    trial_id: int
    configuration: Configuration
    rungs: list[Measured] = field(default_factory=list)
    target: int = 0
    reference: bool = False


def owner_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def owner_gone(owner: str) -> bool:
    """Whether the process that owned a trial has ended (known only for a process of this machine)."""
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    if int(pid) == os.getpid():
        return True  # a trial this very process left (a bracket stopped by an error) is continued
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def rung_results(attrs: Mapping[str, Any]) -> list[Measured]:
    """A trial's results by rung, in order, as far as they go."""
    found: list[Measured] = []
    while f"rung{len(found)}" in attrs:
        found.append(Measured.from_dict(attrs[f"rung{len(found)}"]))
    return found


class TuneStudy:
    """An Optuna study of configurations over ``questions`` (see the module notes)."""

    def __init__(self, study: Any, space: SearchSpace, plan: Plan, questions: Questions) -> None:
        self.study, self.space, self.plan, self.questions = study, space, plan, questions
        self.optuna = optuna_module()
        self.sizes = rung_sizes(len(questions.tuning), plan.eta, plan.smallest)
        self.owner = owner_name()
        self.started = time.time()
        self.backend_failures = 0

    # --- opening ------------------------------------------------------------------------------------

    @classmethod
    def open(cls, storage: str, name: str, space: SearchSpace, plan: Plan, questions: Questions,
             conditions: Mapping[str, Any]) -> TuneStudy:
        """The study ``name`` in ``storage`` (a database URL), created or continued; one that was begun
        under other conditions (objective, space, questions, model, …) is refused naming the first."""
        optuna = optuna_module()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(seed=plan.seed, multivariate=True, group=True, constant_liar=True,
                                                 n_startup_trials=min(plan.bracket, 10))
        database_error = import_extra("sqlalchemy.exc", "tune", "winnow tune").SQLAlchemyError  # optuna's storage
        try:
            opened = optuna.create_study(study_name=name, storage=_storage(optuna, storage),
                                         directions=["maximize", "minimize"], sampler=sampler, load_if_exists=True)
        except (ValueError, ImportError, optuna.exceptions.OptunaError, database_error) as exc:
            reason = str(exc).splitlines()[0]
            raise WinnowError(f"the study {name!r} in {_hidden(storage)} cannot be opened: {reason}",
                              "check --storage (a database URL such as sqlite:///PATH or "
                              "postgresql://USER:PASSWORD@HOST/DB), or use another --study-name") from exc
        _check_conditions(opened, name, dict(conditions))
        study = cls(opened, space, plan, questions)
        if not opened.get_trials(deepcopy=False):
            opened.enqueue_trial(reference_params(space), user_attrs={"reference": True})
        return study

    # --- the search ---------------------------------------------------------------------------------

    def configurations(self) -> int:
        """Configurations drawn so far (any state; refused draws are not configurations)."""
        return sum(1 for t in self.study.get_trials(deepcopy=False) if "config" in t.user_attrs)

    def finished(self) -> int:
        states = (self.optuna.trial.TrialState.COMPLETE, self.optuna.trial.TrialState.PRUNED,
                  self.optuna.trial.TrialState.FAIL)
        return sum(1 for t in self.study.get_trials(deepcopy=False, states=states) if "config" in t.user_attrs)

    def run(self, bench: Workbench, progress: Progress) -> None:
        """Continue this machine's unfinished trials, then draw brackets until ``plan.trials``
        configurations have been drawn."""
        progress.trials(self.finished(), max(self.target(), self.configurations()))
        left = self.unfinished()
        if left:
            progress.note(f"continuing {len(left)} unfinished trial{'s' if len(left) != 1 else ''} "
                          f"({', '.join(str(e.number) for e in left)}) from the rung each had reached")
            self.run_bracket(left, bench, progress)
        if self.target() < self.plan.trials and self.configurations() < self.target():
            progress.note(f"the space holds {self.target()} configurations: each is drawn once")
        while self.configurations() < self.target():
            self.run_bracket(self.new_bracket(), bench, progress)

    def unfinished(self) -> list[Entry]:
        """Running trials whose process has ended on this machine: taken over by this one."""
        running = self.study.get_trials(deepcopy=False, states=(self.optuna.trial.TrialState.RUNNING,))
        entries = []
        for trial in running:
            attrs = trial.user_attrs
            if "config" not in attrs or not owner_gone(str(attrs.get("owner", ""))):
                continue
            self.optuna.trial.Trial(self.study, trial._trial_id).set_user_attr("owner", self.owner)
            entries.append(Entry(trial.number, trial._trial_id, Configuration.from_dict(attrs["config"]),
                                 rung_results(attrs), int(attrs.get("rung", 0)), bool(attrs.get("reference"))))
        return entries

    def target(self) -> int:
        """Configurations to draw in all: ``plan.trials``, or every configuration of a smaller space."""
        size = self.space.size()
        return self.plan.trials if size is None else min(self.plan.trials, size)

    def drawn(self) -> dict[str, int]:
        """Each configuration drawn so far (its key) and the trial that measures it."""
        return {Configuration.from_dict(t.user_attrs["config"]).key(): t.number
                for t in self.study.get_trials(deepcopy=False) if "config" in t.user_attrs}

    def new_bracket(self) -> list[Entry]:
        """Up to ``plan.bracket`` new configurations drawn by the sampler (the reference first, in a
        new study). A rule between settings refuses a draw before it costs a call; a configuration
        already drawn is told its twin's outcome and not measured again; when the sampler keeps
        repeating itself (a small discrete space), a configuration not yet drawn is drawn at random."""
        wanted = min(self.plan.bracket, self.target() - self.configurations())
        drawn = self.drawn()
        entries: list[Entry] = []
        refused = repeated = 0
        while len(entries) < wanted:
            trial = self.study.ask()
            try:
                configuration = draw(self.space, trial)
            except InputError as exc:  # a rule between settings (k ≤ n, step ≤ window): no call made
                trial.set_user_attr("refused", str(exc))
                self.study.tell(trial, state=self.optuna.trial.TrialState.FAIL)
                refused += 1
                if refused > MAX_REFUSED_PER_CONFIGURATION * max(wanted, 1):
                    raise WinnowError(f"{self.space.source}: the settings' rules refused {refused} configurations "
                                      f"in a row, e.g. {exc}", "narrow the ranges so that k ≤ n and step ≤ window "
                                                              "hold for most values") from exc
                continue
            key = configuration.key()
            if key in drawn:
                self.tell_repeat(trial, drawn[key], configuration)
                repeated += 1
                if repeated % REPEATS_BEFORE_RANDOM == 0:
                    self.enqueue_undrawn(set(drawn), repeated)
                continue
            drawn[key] = trial.number
            reference = bool(trial.user_attrs.get("reference"))
            for name, value in (("config", configuration.to_dict()), ("label", configuration.label()),
                                ("owner", self.owner), ("rung", 0)):
                trial.set_user_attr(name, value)
            entries.append(Entry(trial.number, trial._trial_id, configuration, reference=reference))
        return entries

    def tell_repeat(self, trial: Any, twin: int, configuration: Configuration) -> None:
        """A draw of a configuration already drawn: told what its twin was told (the sampler learns
        the same lesson), measured never."""
        states = self.optuna.trial.TrialState
        original = self.study.get_trials(deepcopy=False)[twin]
        trial.set_user_attr("repeat_of", twin)
        trial.set_user_attr("label", configuration.label())
        if original.state == states.COMPLETE:
            self.study.tell(trial, values=list(original.values))
        else:
            self.study.tell(trial, state=states.PRUNED if original.state == states.PRUNED else states.FAIL)

    def enqueue_undrawn(self, drawn: set[str], seed: int) -> None:
        """Queue a configuration not drawn yet, chosen uniformly at random (seeded)."""
        rng = random.Random(self.plan.seed * 1_000_003 + seed)
        for _ in range(2000):
            params = random_params(self.space, rng)
            try:
                configuration = draw(self.space, self.optuna.trial.FixedTrial(params))
            except InputError:
                continue
            if configuration.key() not in drawn:
                self.study.enqueue_trial(params)
                return

    def run_bracket(self, entries: list[Entry], bench: Workbench, progress: Progress) -> None:
        """Measure the bracket rung by rung, halving it between rungs (:mod:`.halving`)."""
        alive = list(entries)
        while alive:
            rung = min(entry.target for entry in alive)
            due = [entry for entry in alive if entry.target == rung]
            for entry in due:
                if len(entry.rungs) <= rung and not self.measure_rung(entry, rung, bench, progress):
                    alive.remove(entry)
            due = [entry for entry in due if entry in alive]
            if rung == len(self.sizes) - 1:
                for entry in due:
                    whole = joined(entry.rungs)
                    self.study.tell(entry.number, values=[_mean(whole.quality), _mean(whole.cost)])
                    alive.remove(entry)
            else:
                self.halve(due, rung, alive)
            progress.trials(self.finished(), max(self.target(), self.configurations()))

    def halve(self, due: list[Entry], rung: int, alive: list[Entry]) -> None:
        """Decide which of ``due`` (measured on ``rung``) go on: promoted ones are due on the next rung
        (saved before the others are told PRUNED, so a stop in between loses no decision)."""
        points = {entry.number: self.point(entry.number, entry.rungs, rung) for entry in due}
        going = set(promoted(list(points.values()), self.rivals(rung), self.plan.eta,
                             always=[entry.number for entry in due if entry.reference]))
        for entry in due:
            if entry.number in going:
                entry.target = rung + 1
                self.optuna.trial.Trial(self.study, entry.trial_id).set_user_attr("rung", rung + 1)
        for entry in due:
            if entry.number not in going:
                self.study.tell(entry.number, state=self.optuna.trial.TrialState.PRUNED)
                alive.remove(entry)

    def point(self, number: int, rungs: Sequence[Measured], rung: int) -> Point:
        """A trial's quality per question and mean cost over the questions of rungs 0..``rung``."""
        whole = joined(rungs[: rung + 1])
        return Point(number, tuple(whole.quality), _mean(whole.cost))

    def rivals(self, rung: int) -> list[Point]:
        """Every configuration of the study measured on ``rung``'s questions (any bracket, any machine)."""
        found = []
        for trial in self.study.get_trials(deepcopy=False):
            rungs = rung_results(trial.user_attrs)
            if len(rungs) > rung and "twin_of" not in trial.user_attrs:
                found.append(self.point(trial.number, rungs, rung))
        return found

    def measure_rung(self, entry: Entry, rung: int, bench: Workbench, progress: Progress) -> bool:
        """Measure ``entry`` on ``rung``'s new questions and keep the result in the study; False when
        the backend refused it (the trial is told FAIL; several in a row stop the study)."""
        start = self.sizes[rung - 1] if rung else 0
        items = self.questions.tuning[start:self.sizes[rung]]
        trial = self.optuna.trial.Trial(self.study, entry.trial_id)
        twin = self.twin(entry, rung)
        if twin is not None:  # the same configuration, drawn again: its results, no call
            found, twin_number = twin
            trial.set_user_attr("twin_of", twin_number)
        else:
            progress.measuring(f"trial {entry.number} · rung {rung + 1}/{len(self.sizes)} "
                               f"({self.sizes[rung]} questions) · {entry.configuration.label()}", len(items))
            try:
                found = self.ask(entry.configuration, items, bench, progress)
            except BackendError as exc:
                self.backend_failures += 1
                trial.set_user_attr("failed", str(exc))
                self.study.tell(entry.number, state=self.optuna.trial.TrialState.FAIL)
                progress.note(f"trial {entry.number} failed: {exc}")
                if self.backend_failures >= MAX_BACKEND_FAILURES:
                    raise
                return False
            self.backend_failures = 0
        found.answers = []  # the tuning rungs keep scores only; confirming keeps the answers too
        trial.set_user_attr(f"rung{rung}", found.to_dict())
        entry.rungs.append(found)
        return True

    def twin(self, entry: Entry, rung: int) -> tuple[Measured, int] | None:
        key = entry.configuration.key()
        for trial in self.study.get_trials(deepcopy=False):
            attrs = trial.user_attrs
            if trial.number != entry.number and f"rung{rung}" in attrs and "twin_of" not in attrs \
                    and "config" in attrs and Configuration.from_dict(attrs["config"]).key() == key:
                original = Measured.from_dict(attrs[f"rung{rung}"])
                copied = dataclasses.replace(original, calls=0, cache_hits=original.uncached_calls, tokens=0,
                                             seconds=0.0)
                return copied, trial.number
        return None

    def ask(self, configuration: Configuration, items: Sequence[QAItem], bench: Workbench,
            progress: Progress) -> Measured:
        return measure(bench.pipeline(configuration), items, objective=self.plan.objective, cost=self.plan.cost,
                       qrels=self.questions.qrels, prices=self.questions.prices, batch_size=self.plan.batch_size,
                       on_questions=progress.answered)

    # --- confirming ---------------------------------------------------------------------------------

    def completed(self) -> list[tuple[int, Configuration, Measured]]:
        """The trials measured on every tuning question: number, configuration, results."""
        done = self.study.get_trials(deepcopy=False, states=(self.optuna.trial.TrialState.COMPLETE,))
        return [(t.number, Configuration.from_dict(t.user_attrs["config"]), joined(rung_results(t.user_attrs)))
                for t in done if "config" in t.user_attrs]

    def chosen(self) -> list[int]:
        """The trials to confirm: the tuning front's best ``plan.confirm`` by quality, and the reference."""
        completed = self.completed()
        seen: dict[str, int] = {}
        for number, configuration, _ in completed:
            seen.setdefault(configuration.key(), number)  # a configuration drawn twice is one point
        points = [Point(n, tuple(m.quality), _mean(m.cost)) for n, _, m in completed if n in seen.values()]
        front = sorted(pareto_front(points), key=lambda p: (-p.mean_quality, p.cost, p.key))
        picked = [p.key for p in front[: self.plan.confirm]]
        reference = self.reference_number()
        if reference is not None and reference not in picked:
            picked.append(reference)
        return picked

    def reference_number(self) -> int | None:
        return next((t.number for t in self.study.get_trials(deepcopy=False)
                     if t.user_attrs.get("reference") and "config" in t.user_attrs), None)

    def confirm(self, bench: Workbench, progress: Progress) -> dict[int, Measured]:
        """The chosen trials measured on the confirming questions (kept in the study: done once)."""
        results: dict[int, Measured] = {}
        trials = {t.number: t for t in self.study.get_trials(deepcopy=False)}
        for number in self.chosen():
            key = f"confirm:{number}"
            kept = self.study.user_attrs.get(key)
            if kept is None:
                configuration = Configuration.from_dict(trials[number].user_attrs["config"])
                progress.measuring(f"confirming trial {number} ({len(self.questions.confirming)} questions) · "
                                   f"{configuration.label()}", len(self.questions.confirming))
                found = self.ask(configuration, self.questions.confirming, bench, progress)
                self.study.set_user_attr(key, found.to_dict())
                results[number] = found
            else:
                results[number] = Measured.from_dict(kept)
        return results

    def save_session(self, seconds: float) -> None:
        """This run's wall time, kept in the study (the summary adds every run's)."""
        self.study.set_user_attr(f"session:{self.owner}:{int(self.started)}", round(seconds, 3))


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _storage(optuna: Any, url: str) -> Any:
    """The study's database; SQLite waits for another writer's lock instead of failing at once.
    Each of its operations runs whole, Ctrl-C or not (:func:`_uninterruptible_storage`)."""
    kwargs: dict[str, Any] = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    return _uninterruptible_storage(optuna.storages.RDBStorage)(url, engine_kwargs=kwargs)


def _uninterruptible_storage(base: type) -> type:
    """``base`` (Optuna's RDBStorage) with every operation run as one uninterruptible block: the
    public ones and the private ones Optuna's cache calls directly (``_get_trials``,
    ``_create_new_trial``, …). A Ctrl-C raised inside one left its SQLAlchemy session mid-statement,
    held by the stop's traceback, with SQLite's lock: the session's time written on the way out then
    waited 60 s for it and failed (reproduced with the suite's load). A subclass, not a wrapper:
    Optuna caches an RDBStorage it recognises."""
    def shielded(method: Any) -> Any:
        @functools.wraps(method)
        def run_whole(*args: Any, **kwargs: Any) -> Any:
            with uninterruptible():
                return method(*args, **kwargs)
        return run_whole

    operations = {name: shielded(member) for name, member in inspect.getmembers(base, inspect.isfunction)
                  if not name.startswith("__") and inspect.isfunction(inspect.getattr_static(base, name))}
    return type(f"Uninterruptible{base.__name__}", (base,), operations)


def _hidden(url: str) -> str:
    """A database URL with its password replaced, for a message."""
    head, at, tail = url.rpartition("@")
    if not at or "://" not in head:
        return url
    scheme, _, credentials = head.partition("://")
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{tail}"


def _check_conditions(study: Any, name: str, conditions: dict[str, Any]) -> None:
    """Refuse to continue a study under other conditions than it was begun with (naming the first)."""
    before = study.user_attrs.get(CONDITIONS)
    if before is None:
        study.set_user_attr(CONDITIONS, conditions)
        return
    for key in sorted(set(before) | set(conditions)):
        if before.get(key) != conditions.get(key):
            raise WinnowError(f"the study {name!r} was begun with {key} = {before.get(key)!r}, not "
                              f"{conditions.get(key)!r}: its trials measure something else",
                              "run it with the options it was begun with, or start another with --study DIR "
                              "(or --study-name NAME)")

