"""What a method is: a named recipe of stages with the paper's defaults, run over a batch of questions.

A method builds its stages once (:meth:`Method.__init__`), composed into one value, its recipe
(``Retriever(...) >> PointwiseTrueReranker(...) % k >> Reader(...)``, :mod:`winnow.stages.recipe`),
and runs it over a batch of :class:`~winnow.stages.contract.QuestionState` (:meth:`Method.run_batch`):
each stage sees every question of the batch at once, so its LLM calls go to the backend together.
:meth:`Method.ask` is the batch of one; every trace records the recipe it ran. Agent roles (MAIN-RAG's
judge, RRR's rewriter, …) are named in ``roles``; each may run on a model of its own. Trained
rerankers (``rerankers``, e.g. ``winnow serve --rerank-model``'s) reach every stage the method
builds through :meth:`Method.reranker` or :mod:`.final_rerank`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Mapping, Sequence

from ..errors import WinnowError, WinnowWarning
from ..llm.client import LLM
from ..models.loading import check_trained_framing
from ..records import DEFAULT_ROLE, Answer, CandidateList, Query
from ..settings import SettingError, Settings, at_least
from ..stages.adaptive_depth import AdaptiveDepth
from ..stages.contract import ListStage, QuestionState, Stage
from ..stages.injection import GuardMode, InjectionGuard
from ..stages.reader import Reader
from ..stages.recipe import Recipe
from ..stages.retrieve import Retriever, SearchIndex
from .reranking import TrainedRerankers, check_trained_rerankers, choose_reranker


@dataclass
class MethodSettings(Settings):
    """Settings every method has; subclasses add their own. ``n`` passages are retrieved,
    ``k`` reach the reader.

    ``framing`` is how prompts reach the model: ``chat`` through the model's chat template, or
    ``plain``, the "System: … User: … Assistant:" text RankRAG's Appendix D prints, sent as a raw
    completion. ``task`` picks the Appendix D prompt variants of RankRAG's task types (§5.1):
    ``qa`` (NQ/TriviaQA/HotpotQA/PopQA), ``fever`` (claims to verify) and ``conversational``
    (Doc2Dial/INSCIT/TopiOCQA: questions carry their dialogue's earlier turns). Only methods whose
    prompts are RankRAG's have the variants (``framings`` and ``tasks`` list what a method has);
    the others refuse the values they do not have rather than ignore them.
    """

    owner: ClassVar[str] = "the method"
    #: The framings and tasks this method's prompts are written for.
    framings: ClassVar[tuple[str, ...]] = ("chat",)
    tasks: ClassVar[tuple[str, ...]] = ("qa",)
    # No model's context holds more than about a million tokens, and no first stage is read deeper
    # than this: a larger value is a typo, refused at construction rather than at the first question.
    upper_bounds: ClassVar[dict[str, float]] = {"n": 100_000, "k": 100_000, "max_answer_tokens": 1_048_576}
    server_caps: ClassVar[dict[str, int]] = {"max_answer_tokens": 512}
    #: The settings of a method's conformance run (:mod:`winnow.testing`): small enough for an
    #: eight-passage index and a 135M model in seconds, large enough that every stage has work (a
    #: reranker more than k passages, a window fewer than N). Subclasses add theirs; merged like
    #: ``upper_bounds``, so a new method's run is its base's until it says otherwise.
    contract_values: ClassVar[dict[str, Any]] = {"n": 4, "k": 2}
    n: int = 20
    k: int = 5
    max_answer_tokens: int = 32
    framing: Literal["chat", "plain"] = "chat"
    task: Literal["qa", "fever", "conversational"] = "qa"

    def __post_init__(self) -> None:
        # Here rather than in check(): subclasses that replace check() keep this refusal.
        for setting, allowed in (("framing", self.framings), ("task", self.tasks)):
            value = getattr(self, setting)
            self.require(value in allowed, setting,
                         f"setting {setting!r} = {value!r} is not available here: this method's prompts "
                         f"have {', '.join(repr(a) for a in allowed)}",
                         "the plain framing and the fever/conversational tasks are RankRAG's Appendix D "
                         "prompts: methods rankrag, vanilla and no-retrieval have them")

    @classmethod
    def contract_run(cls) -> dict[str, Any]:
        """:attr:`contract_values` merged down the class hierarchy, the class's own over its bases'."""
        merged: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            merged.update(vars(klass).get("contract_values", {}))
        # None: the setting keeps its default (a base's value the method has no use for, its k).
        return {key: value for key, value in merged.items() if value is not None}

    def check(self) -> None:
        refuse_no_passages(self)
        at_least(self, 1, "n", "k", "max_answer_tokens")
        self.require(self.k <= self.n, "k", f"setting 'k' ({self.k}) cannot exceed setting 'n' ({self.n}): the k "
                                            "answered from are chosen among the N retrieved")

    def deviations(self) -> dict[str, str]:
        """The settings whose value makes the method something its paper does not describe (not an
        ablation the paper runs, not a CPU-sized default): setting -> why. Run labels and reports
        mark them, so that such a run is never read as the paper's method."""
        return {}

    def backend_deviations(self, backend: str) -> dict[str, str]:
        """The deviations these settings may bring on ``backend`` alone (a prompt a hosted API cannot
        take as the paper prints it): setting -> why. The run's deviations add them to :meth:`deviations`."""
        return {}


def refuse_no_passages(settings: MethodSettings) -> None:
    """Refuse k = 0 where the method answers from k passages, naming the method that answers from none
    (the papers' baselines without retrieval) rather than only the bound."""
    settings.require(settings.k != 0, "k", "setting 'k' is 0, but this method answers from its top k passages: "
                                           "at least 1", "--method no-retrieval answers from none, the papers' rows "
                                                         "without retrieval")


#: The guard modes that change what the LLM stages read or the ranking: setting value -> why it is a deviation.
GUARD_DEVIATIONS = {
    "escape": "passages reach the LLM stages escaped of the methods' answer formats and wrapped in <passage> "
              "delimiters (prompt-injection guard); the papers' prompts hold the passage text as it is",
    "demote": "passages escaped and delimited for the LLM stages, and those that read like instructions moved "
              "below the others (prompt-injection guard); the papers rank by the LLM alone",
}


@dataclass
class AdaptiveDepthSettings(MethodSettings):
    """Settings of methods that run an LLM over the first-stage list (RankRAG, MAIN-RAG, RRR, RankGPT).

    ``adaptive_depth`` is the first-stage margin (:mod:`winnow.stages.adaptive_depth`, in (0, 1])
    at which a question counts as sure, its LLM stages then seeing only its top
    ``adaptive_depth_keep`` candidates (0: none, the first stage's order kept). 0, the default, is
    off: every question gets the paper's method.
    """

    upper_bounds: ClassVar[dict[str, float]] = {"adaptive_depth_keep": 100_000}
    adaptive_depth: float = 0.0
    adaptive_depth_keep: int = 0
    #: Prompt injection in passages (:mod:`winnow.stages.injection`): ``flag`` (default) marks passages
    #: that read like instructions in the trace and changes nothing else; ``escape`` also hands the LLM
    #: stages every passage as data (answer formats escaped, delimiters); ``demote`` also moves flagged
    #: passages below the others. ``off`` is the papers' (``--profile paper``).
    injection_guard: GuardMode = "flag"

    def __post_init__(self) -> None:
        super().__post_init__()
        # Here rather than in check(): MAIN-RAG replaces check() and must keep these refusals.
        self.require(0.0 <= self.adaptive_depth <= 1.0, "adaptive_depth",
                     f"setting 'adaptive_depth' must be between 0 and 1 (got {self.adaptive_depth})",
                     "it is the first stage's margin (its top score's share, scaled to 0..1) at which the LLM "
                     "stage is shortened; 0 is off (the paper's method)")
        at_least(self, 0, "adaptive_depth_keep")
        self.require(self.adaptive_depth > 0 or self.adaptive_depth_keep == 0, "adaptive_depth_keep",
                     f"setting 'adaptive_depth_keep' ({self.adaptive_depth_keep}) only applies with "
                     "adaptive_depth above 0 (it is 0, off)",
                     "set adaptive_depth too, or leave adaptive_depth_keep out")
        self.require(self.adaptive_depth == 0 or self.adaptive_depth_keep < self.n, "adaptive_depth_keep",
                     f"setting 'adaptive_depth_keep' ({self.adaptive_depth_keep}) must be below setting 'n' "
                     f"({self.n}): a sure question's LLM stage would see the whole list anyway",
                     "0 skips the LLM stage for sure questions")

    def deviations(self) -> dict[str, str]:
        guard = {"injection_guard": GUARD_DEVIATIONS[self.injection_guard]} \
            if self.injection_guard in GUARD_DEVIATIONS else {}
        if not self.adaptive_depth:
            return {**super().deviations(), **guard}
        depth = "skipped" if self.adaptive_depth_keep == 0 else f"shortened to the top {self.adaptive_depth_keep}"
        return {**super().deviations(),
                "adaptive_depth": f"the LLM stage {depth} for questions whose first-stage margin is at least "
                                  f"{self.adaptive_depth:g}; the papers run it on every question", **guard}


@dataclass
class RerankingSettings(AdaptiveDepthSettings):
    """Settings of methods that rerank the first-stage list.

    ``fusion_alpha`` blends the reranker's and the first stage's min-max normalised scores;
    ``fusion_weights`` = [w_llm, w_first, bias] combines them by a fitted logistic model instead
    (:func:`winnow.stages.fusion.calibrated`, fitted by ``winnow fit-fusion``). Neither is the papers'.
    """

    fusion_alpha: float = 0.0  # blend with the first-stage score; 0 reproduces the paper
    fusion_weights: tuple[float, ...] = ()  # calibrated fusion [w_llm, w_first, bias]; () is off

    def check(self) -> None:
        super().check()
        self.require(0.0 <= self.fusion_alpha <= 1.0, "fusion_alpha",
                     f"setting 'fusion_alpha' must be between 0 and 1 (got {self.fusion_alpha})",
                     "0 reproduces the paper, 1 keeps the retriever's order")
        self.require(len(self.fusion_weights) in (0, 3), "fusion_weights",
                     f"setting 'fusion_weights' must hold 3 numbers [w_llm, w_first, bias] (got "
                     f"{len(self.fusion_weights)})", "`winnow fit-fusion` fits them; [] is off")
        self.require(not (self.fusion_weights and self.fusion_alpha), "fusion_weights",
                     "settings 'fusion_weights' and 'fusion_alpha' are two ways to combine the same two scores "
                     "and cannot both be set", "set fusion_alpha=0 to use the fitted weights")

    @property
    def fusing(self) -> bool:
        """Whether the reranker's score is combined with the first stage's (then every passage keeps its score)."""
        return bool(self.fusion_alpha or self.fusion_weights)

    def deviations(self) -> dict[str, str]:
        if not self.fusion_weights:
            return super().deviations()
        return {**super().deviations(),
                "fusion_weights": "the LLM's score and the first stage's combined by a logistic model fitted on "
                                  "tuning questions (calibrated fusion); the papers rank by the LLM's score alone"}


def adaptive_depth(settings: AdaptiveDepthSettings, retriever: Retriever, *stages: Stage) -> AdaptiveDepth:
    """The LLM ``stages`` under the settings' adaptive depth (:mod:`winnow.stages.adaptive_depth`),
    reading ``retriever``'s scores: they run as they are while ``adaptive_depth`` is 0."""
    return AdaptiveDepth(settings.adaptive_depth, settings.adaptive_depth_keep, retriever.kind, stages)


def guarded(settings: AdaptiveDepthSettings, *stages: Stage) -> InjectionGuard:
    """The LLM ``stages`` under the settings' injection guard (:mod:`winnow.stages.injection`): as they
    are while it is ``off``; ``flag`` records flagged passages and changes nothing else."""
    return InjectionGuard(settings.injection_guard, stages)


def check_dialogue(settings: MethodSettings, questions_with_history: int) -> None:
    """Refuse questions with a dialogue history under a task whose prompts have no place for it
    (they would be answered as if the history had not been given)."""
    if questions_with_history and settings.task != "conversational":
        raise SettingError("task", f"{questions_with_history} question(s) carry a dialogue history, which task "
                                   f"{settings.task!r} has no place for",
                           "set the task setting to 'conversational' (methods rankrag, vanilla and no-retrieval)")


def role_name(role: str) -> str:
    """``judge``, whether written ``judge``, ``judge_llm`` or ``judge_model`` (older spellings)."""
    for suffix in ("_llm", "_model"):
        if role.endswith(suffix):
            return role[: -len(suffix)]
    return role


class Method:
    """A named recipe of stages. Subclasses set the class attributes and build ``self.recipe``
    (stages composed with ``>>`` and ``%``) or override :meth:`run_batch` for a recipe with a loop
    (RRR, whose recipe is then the value that describes it)."""

    name: ClassVar[str]
    summary: ClassVar[str]
    stages: ClassVar[tuple[str, ...]]
    #: The method's settings type: MethodSettings or a subclass adding the method's own knobs.
    Settings: ClassVar[type[MethodSettings]] = MethodSettings
    #: Agent roles that may run on a model of their own: role -> what it does.
    roles: ClassVar[dict[str, str]] = {}
    #: Settings the method inherits but does not read (vanilla's ``n``, MAIN-RAG's ``k``): left out
    #: of run labels, and refused as a ``--sweep`` (every value would give the same run).
    unused_settings: ClassVar[tuple[str, ...]] = ()

    def __init__(self, index: SearchIndex, llm: LLM, settings: MethodSettings,
                 agents: Mapping[str, LLM] | None = None, rerankers: TrainedRerankers | None = None) -> None:
        self.index = index
        self.settings = settings
        self.llm = llm
        self.agents = {role_name(role): agent for role, agent in (agents or {}).items()}
        check_roles(self.name, self.roles, self.agents)
        #: Trained rerankers given to the method: kind -> model (:mod:`.reranking`); a ``rerank_model``
        #: setting wins over them, the kind's default checkpoint follows them.
        self.rerankers = check_trained_rerankers(rerankers)
        self.recipe = Recipe()
        #: Stage name -> the agent role whose model it calls (``llm_for(role)``); a stage not named
        #: calls the method's own model, role "default". Traces carry it, so cost splits by role.
        self.stage_roles: dict[str, str] = {}
        #: What the user should know about how the method was built (a front door prints them).
        self.notices: list[str] = []
        # A fine-tuned model is prompted in the framing it learnt (RankRAG App. C and D).
        models = {DEFAULT_ROLE: llm, **self.agents}
        for notice in check_trained_framing(self.name, settings.framing, settings.framings,
                                            {role: getattr(m.backend, "source", None) for role, m in models.items()}):
            self.notice(notice)
        # A served model whose record could not be looked up (llm/served_model.py): said once per backend.
        for backend in {id(m.backend): m.backend for m in models.values()}.values():
            noted = getattr(backend, "source_note", None)
            note = noted() if callable(noted) else ""
            if note:
                self.notice(note)

    @property
    def recipe(self) -> Recipe:
        """The method's stages composed (:mod:`winnow.stages.recipe`); ``run_batch`` runs it."""
        return self._recipe

    @recipe.setter
    def recipe(self, value: Recipe) -> None:
        self._recipe = value
        self._printed = ""

    def printed_recipe(self) -> str:
        """``repr(self.recipe)``, printed once (every trace records it; a fast run asks thousands of questions)."""
        if not self._printed:
            self._printed = repr(self._recipe)
        return self._printed

    def notice(self, text: str) -> None:
        """Keep ``text`` in :attr:`notices` and raise it as a :class:`WinnowWarning` for Python callers."""
        self.notices.append(text)
        warnings.warn(text, WinnowWarning, stacklevel=3)

    def llm_for(self, role: str) -> LLM:
        """The model of ``role``: its own if one was given, else the method's model."""
        return self.agents.get(role, self.llm)

    def reranker_named(self, choice: str, *, role: str = "rerank", model: str = "", **options: Any) -> ListStage:
        """The reranker ``choice`` names (:func:`~.reranking.choose_reranker`) on the model of ``role``,
        a trained one on ``model`` if named, else on the one this method was given, else the default."""
        return choose_reranker(choice, llm=self.llm_for(role), model=model, rerankers=self.rerankers, **options)

    def run_batch(self, batch: Sequence[QuestionState], *, answer: bool = True) -> None:
        """Run the recipe over ``batch``; afterwards each state holds its answer and final passages.
        With ``answer=False`` the recipe stops before its reader: the passages it would answer from."""
        (self.recipe if answer else self.recipe.without(Reader)).run(batch)

    def ask_batch(self, questions: Sequence[str | Query], *, answer: bool = True) -> list[Answer]:
        """Answer many questions, each stage over all of them at once; answers in question order.
        ``answer=False`` selects the passages without generating an answer (its text is empty):
        the method as a retriever (:mod:`winnow.integrations`)."""
        batch = [QuestionState(q if isinstance(q, Query) else Query(text=q)) for q in questions]
        check_dialogue(self.settings, sum(1 for state in batch if state.query.history))
        if batch:
            self.run_batch(batch, answer=answer)
            for state in batch:
                state.trace.recipe = self.printed_recipe()
                for stage in state.trace.stages:
                    if stage.llm_calls:
                        stage.role = self.stage_roles.get(stage.name, DEFAULT_ROLE)
        return [self._answer(state) for state in batch]

    def ask(self, question: str | Query, *, answer: bool = True) -> Answer:
        [result] = self.ask_batch([question], answer=answer)
        return result

    def _answer(self, state: QuestionState) -> Answer:
        state.trace.seconds = sum(stage.seconds for stage in state.trace.stages)
        passages: CandidateList = state.ranked
        return Answer(question=state.query.text, text=state.answer.text if state.answer else "", method=self.name,
                      passages=passages, trace=state.trace, settings={"method": self.name, **self.settings.to_dict()})


def check_roles(method: str, roles: Mapping[str, str], given: Mapping[str, Any]) -> None:
    """Refuse agent roles the method does not have, naming the roles it has."""
    unknown = sorted(set(given) - set(roles))
    if unknown:
        have = ", ".join(roles) if roles else "none"
        raise WinnowError(f"method {method!r} has no agent role(s) {unknown}",
                          f"its roles: {have} (`winnow methods` lists every method's roles)")
