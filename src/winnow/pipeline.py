"""A run specification and the open pipeline it describes: what `ask`, `eval` and `serve` share.

A :class:`RunSpec` is the resolved answer to "which method, with which models, retriever and
settings" (config file < flags, checked before any model loads). A :class:`Pipeline` opens the
index and the models once and answers many questions with them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .config import RUN_OPTIONS, read_config, resolve
from .errors import InputError
from .records import Answer, CandidateList, Query
from .settings import SettingError

if TYPE_CHECKING:
    from .stages.retrieve import SearchIndex

DEFAULT_METHOD = "rankrag"
DEFAULT_MODEL = "qwen2.5-coder-1.5b"
DEFAULT_BACKEND = "llama.cpp"
DEFAULT_RETRIEVER = "bm25"
#: Run options that give one agent role its own model (older spellings of ``agents={"judge": …}``).
ROLE_OPTIONS = {"judge_model": "judge", "final_model": "final"}


@dataclass
class RunSpec:
    """Everything that decides a run's answers (the API key aside, which is never recorded)."""

    method: str = DEFAULT_METHOD
    model: str = DEFAULT_MODEL
    backend: str = DEFAULT_BACKEND
    base_url: str = ""
    retriever: str = DEFAULT_RETRIEVER
    context_size: int | None = None  # tokens of prompt + answer; None: the backend's (llama.cpp: 4,096)
    max_inflight: int | None = None  # LLM calls in flight (--backend openai); not recorded: answers do not depend on it
    slots: int | None = None  # sequences llama.cpp decodes together (--backend llama.cpp); None: 1
    agents: dict[str, str] = field(default_factory=dict)  # agent role -> model, e.g. {"judge": "qwen2.5-coder-1.5b"}
    settings: dict[str, Any] = field(default_factory=dict)  # method setting overrides, the profile's included
    profile: str = ""  # the named preset the settings started from (winnow.methods.profiles), "" for none

    @classmethod
    def resolve(cls, *, config: str | Path | None = None, run: dict[str, Any] | None = None,
                settings: dict[str, Any] | None = None, agents_for_method: bool = True) -> RunSpec:
        """Merge a config file (TOML/YAML) with explicit values; explicit values that are not None win.

        ``run`` holds run options (method, model, backend, base_url, retriever, agents, profile, and
        the older judge_model / final_model); ``settings`` holds method settings (n, k, window, ...),
        coerced and checked by the method's typed settings. A ``profile`` (e.g. "paper") gives the
        method's settings their preset values first; the file's and the explicit ones override it.
        Unknown keys in the file, settings the method does not have and values of the wrong type
        are errors naming the key. With
        ``agents_for_method``, an agent role the method does not have is refused (a server, whose
        requests choose their method, keeps roles for the methods that have them).
        """
        from .methods import check_agent_roles, method_class, method_settings, profile_settings

        file_settings = read_config(config) if config else {}
        if config:
            check_config_keys(file_settings, config)
        chosen: dict[str, Any] = {key: file_settings.get(key) for key in RUN_OPTIONS if key != "api_key"}
        chosen.update({key: value for key, value in (run or {}).items() if value is not None})
        agents = agent_models(chosen.pop("agents", None) or {}, config or "agents")
        for option, role in ROLE_OPTIONS.items():
            if chosen.get(option):
                agents[role] = chosen[option]
        spec = cls(**{key: value for key, value in chosen.items() if value is not None and key in _SPEC_FIELDS},
                   agents=agents)
        if spec.context_size is not None:
            from .settings import coerce_value

            spec.context_size = coerce_value("context_size", int, spec.context_size)
            if spec.context_size < 64:
                raise SettingError("context_size", f"setting 'context_size' must be at least 64 tokens "
                                                   f"(got {spec.context_size})")
        if spec.slots is not None:
            spec.slots = checked_run_slots(spec.slots, spec.backend)
        if not isinstance(spec.profile, str):
            raise SettingError("profile", f"profile must be a name such as 'paper' (got {spec.profile!r})")
        explicit = resolve(method_class(spec.method).Settings, spec.method, file_settings, settings or {},
                           config or "config")
        spec.settings = {**profile_settings(spec.profile, spec.method, explicit.get("task")), **explicit}
        method_settings(spec.method, **spec.settings)  # fail fast, before loading a model
        if agents_for_method:
            check_agent_roles(spec.method, spec.agents)
        return spec

    def to_dict(self) -> dict[str, Any]:
        """The spec as run folders record it. MAIN-RAG's roles keep their older keys
        (``judge_model``, ``final_model``) so that run folders made before roles were typed resume."""
        # Options added after run folders existed are left out at their default, so those folders resume.
        # Slots are recorded when there are several: scores then differ slightly from one slot's.
        described = {key: value for key, value in asdict(self).items() if key not in ("agents", "max_inflight")
                     and not (key in ("context_size", "profile") and not value)
                     and not (key == "slots" and (value or 1) == 1)}
        described.update({option: self.agents.get(role) for option, role in ROLE_OPTIONS.items()})
        others = {role: model for role, model in self.agents.items() if role not in ROLE_OPTIONS.values()}
        if others:
            described["agents"] = others
        return described


_SPEC_FIELDS = {f.name for f in fields(RunSpec)} - {"agents"}


def checked_run_slots(value: Any, backend: str) -> int:
    """The run option ``slots`` as a whole number ≥ 1, for the one backend it applies to."""
    from .settings import coerce_value

    slots = coerce_value("slots", int, value)
    if slots < 1:
        raise SettingError("slots", f"setting 'slots' must be at least 1 (got {slots})",
                           "1 runs one sequence at a time, e.g. --slots 4 runs four together")
    if backend != "llama.cpp":
        raise SettingError("slots", f"setting 'slots' applies to the in-process llama.cpp backend, not {backend!r}",
                           "a server's parallel slots are set on the server (llama-server --parallel N); "
                           "leave --slots out" + (" and use --max-inflight" if backend == "openai" else ""))
    return slots


def agent_models(value: Any, source: str | Path) -> dict[str, str]:
    """``agents`` as given in a config file or by ``--agent ROLE=MODEL``: a table of role -> model."""
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise InputError(source, "agents must be a table of role = model name, e.g. judge = \"qwen2.5-coder-1.5b\"",
                         field="agents")
    from .methods import role_name

    return {role_name(role): model for role, model in value.items()}


def check_config_keys(config: dict[str, Any], path: str | Path) -> None:
    """Refuse keys that are neither run options, method names nor any method's settings."""
    from .methods import METHODS

    known = set(RUN_OPTIONS) | set(METHODS) | {name for m in METHODS.values() for name in m.Settings.field_types()}
    unknown = sorted(set(config) - known)
    if unknown:
        raise InputError(path, f"unknown setting(s) {unknown}", hint="`winnow methods` lists every method's settings")


class Pipeline:
    """An index, the models and a method, opened once from a :class:`RunSpec`.

    ``loading`` is told the name of each model as it loads (for a spinner); ``progress`` is the
    LLM clients' per-stage progress hook; ``threads`` caps llama.cpp's CPU threads. Close it (or use
    ``with``) to free the models.
    """

    def __init__(self, spec: RunSpec, index_dir: str | Path, *, api_key: str = "", cache: bool | str | Path = True,
                 progress: Callable[[str, int, int], None] | None = None,
                 loading: Callable[[str], Any] | None = None, threads: int | None = None,
                 retriever: SearchIndex | None = None) -> None:
        from .index import open_retriever
        from .llm import load_llm
        from .methods import agent_roles, build_method

        self.spec = spec
        self.index_dir = Path(index_dir)
        # ``retriever``: a first stage given instead of the index's own (a precomputed run).
        self.index = retriever if retriever is not None else open_retriever(index_dir, spec.retriever)
        self.llms: list[Any] = []

        def llm_for(name: str):
            if loading:
                loading(name)
            llm = load_llm(name, backend=spec.backend, base_url=spec.base_url, api_key=api_key, cache=cache,
                           context_size=spec.context_size, max_inflight=spec.max_inflight, slots=spec.slots,
                           progress=progress, threads=threads)
            self.llms.append(llm)
            return llm

        try:
            self.llm = llm_for(spec.model)
            loaded = {spec.model: self.llm}
            for model in spec.agents.values():
                if model not in loaded:
                    loaded[model] = llm_for(model)
            # role -> LLM, for methods built per request (winnow serve) among those that have the role
            self.agents = {role: loaded[model] for role, model in spec.agents.items() if model != spec.model}
            own = agent_roles(spec.method)
            self.method = build_method(spec.method, index=self.index, llm=self.llm,
                                       agents={role: llm for role, llm in self.agents.items() if role in own},
                                       **spec.settings)
        except BaseException:
            self.close()
            raise

    def ask(self, question: str | Query) -> Answer:
        """Answer one question (a :class:`~winnow.records.Query` to give it a dialogue history)."""
        return self.method.ask(question)

    def ask_batch(self, questions: list[str | Query]) -> list[Answer]:
        """Answer many questions together, each stage over all of them (see :mod:`winnow.stages.contract`)."""
        return self.method.ask_batch(questions)

    def method_with(self, method: str, settings: dict[str, Any], llm: Any = None,
                    agents: dict[str, Any] | None = None) -> Any:
        """Another method (or other settings) over the same index and models: what a server builds per
        request. ``llm``/``agents`` default to this pipeline's; roles the method lacks are left out."""
        from .methods import agent_roles, build_method

        own = agent_roles(method)
        chosen = {role: agent for role, agent in (self.agents if agents is None else agents).items() if role in own}
        return build_method(method, index=self.index, llm=llm or self.llm, agents=chosen, **settings)

    def search(self, query: str, k: int) -> CandidateList:
        """First-stage retrieval alone: the top ``k`` passages of this pipeline's retriever."""
        return self.index.search(query, k=k)

    @property
    def retriever_name(self) -> str:
        return getattr(self.index, "name", self.spec.retriever)

    def model_roles(self) -> dict[int, str]:
        """Each loaded model's role by ``id(llm)``: "default" for the method's model, else its agent role."""
        roles = {id(self.llm): "default"}
        roles.update({id(llm): role for role, llm in self.agents.items()})
        return roles

    def describe(self) -> dict[str, Any]:
        """The resolved settings as `--json` output and run folders record them."""
        described = {"model": self.spec.model, "backend": self.spec.backend, "index": str(self.index_dir),
                     "retriever": self.retriever_name}
        described.update({f"{role}_model": model for role, model in self.spec.agents.items()})
        return described

    def close(self) -> None:
        for llm in self.llms:
            llm.close()
        self.llms.clear()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
