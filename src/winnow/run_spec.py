"""The options that choose a run, declared once, and the run specification they resolve to.

:class:`RunOptions` is every option a run takes (method, models, backend, retriever, settings,
config file, profile), as the command line (``winnow ask``, ``eval``, ``serve``, ``mcp``), the
framework integrations and the Python API give them; ``None`` means "not given". Each field's
metadata holds its flag and help, from which :mod:`winnow.commands.common` builds every command's
options, so no command keeps a copy of them.

:func:`resolve_run` turns options into a :class:`RunSpec`: the config file < ``--set`` and the named
flags, the method's settings resolved once by :func:`winnow.methods.resolve_settings` and checked
before any model loads.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from .config import config_layers, parse_assignment, read_config
from .errors import InputError, WinnowError
from .settings import ModelPath, SettingError, Settings, SettingsLayer, resolve_layers

if TYPE_CHECKING:
    from .methods.base import MethodSettings

DEFAULT_METHOD = "rankrag"
DEFAULT_MODEL = "qwen2.5-coder-1.5b"
DEFAULT_BACKEND = "llama.cpp"
DEFAULT_RETRIEVER = "bm25"
#: Run options that give one agent role its own model (older spellings of ``agents={"judge": …}``).
ROLE_OPTIONS = {"judge_model": "judge", "final_model": "final"}


#: The help panels of the run options, in the order ``--help`` shows them.
PANELS = ("Method", "Settings", "Model", "Server (--backend openai)", "Retrieval")


def option(*flags: str, help: str, panel: str | None = None, minimum: float | None = None, setting: bool = False,  # noqa: A002
           metavar: str | None = None, generated: Callable[[], str] | None = None,
           choices: Callable[[], Sequence[str]] | None = None, listed: bool = True) -> Any:
    """A RunOptions field: not given (``None``) by default, with its command-line ``flags``, its
    one-line ``help`` and the help ``panel`` it is shown under (one of :data:`PANELS`; None: the
    command's own panel for these options). ``setting`` marks a shortcut for a method setting
    (``--n`` for ``--set n=``). ``choices`` gives the values it takes from their registry (the
    methods, backends, retrievers), listed in its help (unless not ``listed``: too many for one
    line) and offered by shell completion; ``generated`` gives other help text from the registries.
    Both are read only when help or a completion is asked for, so a new method is listed without a
    hand list and ``winnow`` starts without importing the methods; the value itself is checked by
    :func:`resolve_run`, the same way for every front door."""
    if panel is not None and panel not in PANELS:
        raise ValueError(f"unknown help panel {panel!r}")
    return field(default=None, metadata={"flags": flags, "help": help, "panel": panel, "minimum": minimum,
                                         "setting": setting, "metavar": metavar, "generated": generated,
                                         "choices": choices, "listed": listed})


def method_choices() -> tuple[str, ...]:
    """The registered methods, for ``--method``."""
    from .methods import METHODS

    return tuple(METHODS)


def profile_choices() -> tuple[str, ...]:
    """The named presets of settings, for ``--profile``."""
    from .methods import PROFILES

    return tuple(PROFILES)


def backend_choices() -> tuple[str, ...]:
    """The LLM backends, for ``--backend``."""
    from .llm import BACKENDS

    return BACKENDS


def retriever_choices() -> tuple[str, ...]:
    """The first-stage retrievers, for ``--retriever``."""
    from .index import RETRIEVER_KINDS

    return RETRIEVER_KINDS


def ann_choices() -> tuple[str, ...]:
    """The ANN index kinds, for ``--ann``."""
    from .index import ANN_KINDS

    return tuple(ANN_KINDS)


@dataclass(frozen=True)
class RunOptions:
    """Every option of a run as a user gives it; ``None`` (or empty) means "not given".

    The help is one line an option (``winnow ask --help`` fits 80 columns); docs/reproducing.md and
    ``winnow methods`` say more."""

    method: str | None = option("--method", "-m", panel="Method", metavar="NAME", choices=method_choices,
                                help="(rankrag)")
    profile: str | None = option("--profile", panel="Method", metavar="NAME", choices=profile_choices,
                                 listed=False, help="Preset settings, e.g. paper.")
    config: Path | None = option("--config", panel="Method", metavar="FILE", help="TOML/YAML settings file; flags win.")
    assignments: tuple[str, ...] | None = option("--set", panel="Method", metavar="KEY=VALUE",
                                                 help="Any method setting (repeatable).")
    n: int | None = option("--n", panel="Settings", setting=True, metavar="N", help="Passages to retrieve (20).")
    k: int | None = option("--k", panel="Settings", setting=True, metavar="K", help="Passages to answer from (5).")
    fusion_alpha: float | None = option("--fusion-alpha", panel="Settings", setting=True, metavar="A",
                                        help="Blend in first-stage scores (0).")
    max_answer_tokens: int | None = option("--max-answer-tokens", panel="Settings", setting=True, metavar="N",
                                           help="Longest answer.")
    framing: str | None = option("--framing", panel="Settings", setting=True, metavar="NAME",
                                 help="chat (default) or plain (App. D).")
    task: str | None = option("--task", panel="Settings", setting=True, metavar="NAME",
                              help="qa (default), fever, conversational.")
    agents: tuple[str, ...] | None = option("--agent", panel="Method", metavar="ROLE=MODEL",
                                            help="A role's model (`winnow methods`).")
    judge_model: str | None = option("--judge-model", panel="Method", metavar="MODEL",
                                     help="mainrag: = --agent judge=MODEL.")
    final_model: str | None = option("--final-model", panel="Method", metavar="MODEL",
                                     help="mainrag: = --agent final=MODEL.")
    model: str | None = option("--model", panel="Model", metavar="NAME",
                               help="Registry name, .gguf, served model.")
    backend: str | None = option("--backend", panel="Model", metavar="NAME", choices=backend_choices,
                                 help="(llama.cpp)")
    context_size: int | None = option("--context-size", panel="Model", metavar="N", help="Context tokens (4096).")
    slots: int | None = option("--slots", panel="Model", minimum=1, metavar="N",
                               help="llama.cpp: sequences at once (1).")
    threads: int | None = option("--threads", panel="Model", minimum=1, metavar="N",
                                 help="llama.cpp CPU threads (all).")
    tokenizer: str | None = option("--tokenizer", panel="Model", metavar="NAME",
                                   help="Count tokens with this tokenizer.")
    no_cache: bool | None = option("--no-cache", panel="Model", help="Bypass the LLM call cache.")
    base_url: tuple[str, ...] | None = option("--base-url", panel="Server (--backend openai)", metavar="URL",
                                              help="Server URL (repeatable).")
    api_key: str | None = option("--api-key", "--backend-api-key", panel="Server (--backend openai)",
                                 metavar="KEY", help="Never recorded.")
    max_inflight: int | None = option("--max-inflight", panel="Server (--backend openai)", minimum=1,
                                      metavar="N", help="Calls at once (64).")
    timeout: float | None = option("--timeout", "--llm-timeout", panel="Server (--backend openai)",
                                   minimum=0.001, metavar="S", help="Seconds a call may take (600).")
    hedge: float | None = option("--hedge", panel="Server (--backend openai)", minimum=0.001, metavar="S",
                                 help="Resend a call after S seconds.")
    retriever: str | None = option("--retriever", panel="Retrieval", metavar="NAME", choices=retriever_choices,
                                   help="(bm25)")
    ann: str | None = option("--ann", panel="Retrieval", metavar="KIND", choices=ann_choices,
                             help="Dense search via this ANN index.")
    ann_set: tuple[str, ...] | None = option("--ann-set", panel="Retrieval", metavar="NAME=VALUE",
                                             help="ANN search setting (repeatable).")

    @classmethod
    def checked(cls, source: str, values: dict[str, Any]) -> RunOptions:
        """Options from keyword arguments (an integration's constructor, the Python API): an unknown
        name is refused naming ``source`` and the options there are."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise WinnowError(f"{source} has no option(s) {unknown}", f"its run options: {', '.join(sorted(known))}")
        return cls(**values)

    @property
    def cache(self) -> bool:
        return not self.no_cache

    def setting_values(self) -> dict[str, Any]:
        """The method settings given by their own flags (``--n 10``), not given ones left out."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.metadata.get("setting") and getattr(self, f.name) is not None}


#: Where the named flags' (and ``--set``'s) values come from, in provenance and messages.
FLAGS_SOURCE = "--set and flags"


@dataclass
class RunSettings(Settings):
    """The run's own knobs, typed like a method's settings and resolved by the same machinery
    (:func:`winnow.settings.resolve_layers`: a config file's top level < ``--set`` and the flags,
    each value coerced as it is read, a refusal naming the layer's field, provenance kept): which
    method and models, the backend and how it is driven. Every front door (the command line, the
    Python API, the framework adapters, ``winnow serve`` and ``winnow mcp``) resolves its run through
    :func:`resolve_run`, so a knob is checked once, the same way everywhere.

    ``model`` and ``tokenizer`` name files or folders here (:data:`~winnow.settings.ModelPath`): a
    server's requests cannot set them (requests choose only the method and its settings)."""

    owner: ClassVar[str] = "the run"
    upper_bounds: ClassVar[dict[str, float]] = {"context_size": 1_048_576}
    method: str = DEFAULT_METHOD
    model: ModelPath = DEFAULT_MODEL
    backend: Literal["llama.cpp", "openai", "transformers"] = "llama.cpp"
    base_url: str = ""
    retriever: Literal["bm25", "dense", "hybrid", "lucene"] = "bm25"
    context_size: int | None = None
    max_inflight: int | None = None
    slots: int | None = None
    timeout: float | None = None
    hedge: float | None = None
    tokenizer: ModelPath = ""
    profile: str = ""
    ann: str = ""

    def check(self) -> None:
        from .methods import METHODS, profile_named

        self.require(self.method in METHODS, "method", f"unknown method {self.method!r}",
                     f"choose one of: {', '.join(METHODS)}")
        for name, low, unit in (("context_size", 64, " tokens"), ("max_inflight", 1, ""), ("slots", 1, "")):
            value = getattr(self, name)
            self.require(value is None or value >= low, name,
                         f"setting {name!r} must be at least {low}{unit} (got {value})")
        for name in ("timeout", "hedge"):
            value = getattr(self, name)
            self.require(value is None or value > 0, name, f"setting {name!r} must be more than 0 seconds "
                                                           f"(got {value})")
        self.require(self.slots is None or self.backend == "llama.cpp", "slots",
                     f"setting 'slots' applies to the in-process llama.cpp backend, not {self.backend!r}",
                     "a server's parallel slots are set on the server (llama-server --parallel N); leave --slots "
                     "out" + (" and use --max-inflight" if self.backend == "openai" else ""))
        if self.profile:
            profile_named(self.profile)


#: The run options a RunSettings holds, and those that are tables (role -> model, ANN search settings).
RUN_SETTINGS = tuple(f.name for f in fields(RunSettings))
RUN_TABLES = ("agents", "judge_model", "final_model", "ann_set")


#: Fields of RunOptions that are not recorded in a RunSpec (secrets and how to run, not what).
_NOT_IN_SPEC = {"api_key", "threads", "no_cache", "assignments", "config", "agents"}


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
    timeout: float | None = None  # seconds per LLM call attempt (--backend openai); not recorded, like max_inflight
    hedge: float | None = None  # seconds before a straggling call is sent again (--backend openai); not recorded
    #: --backend openai: the tokenizer that counts here (winnow.llm.hf_tokens), "" for the server's /tokenize
    tokenizer: str = ""
    agents: dict[str, str] = field(default_factory=dict)  # agent role -> model, e.g. {"judge": "qwen2.5-coder-1.5b"}
    settings: dict[str, Any] = field(default_factory=dict)  # method setting overrides, the profile's included
    profile: str = ""  # the named preset the settings started from (winnow.methods.profiles), "" for none
    #: Dense search through this ANN index of the index ("hnsw", "ivfpq"), "" for exact search
    ann: str = ""
    #: The ANN index's search settings changed for this run (``{"efSearch": 512}``), checked by :func:`checked_ann`
    ann_set: dict[str, int] = field(default_factory=dict)
    #: A precomputed first stage read instead of retrieving (``winnow eval --run``): "PATH sha256:HEX", "" for none
    first_stage_run: str = ""
    #: setting or run option -> the source that gave it ("profile 'paper'", "config run.toml", "--set and flags")
    provenance: dict[str, str] = field(default_factory=dict, compare=False)

    @classmethod
    def resolve(cls, *, config: str | Path | None = None, run: dict[str, Any] | None = None,
                settings: dict[str, Any] | None = None, agents_for_method: bool = True,
                more_settings: SettingsLayer | None = None) -> RunSpec:
        """Merge a config file (TOML/YAML) with explicit values; explicit values that are not None win.

        ``run`` holds run options (method, model, backend, base_url, retriever, agents, profile, and
        the older judge_model / final_model), resolved as :class:`RunSettings` over the file's top
        level (:func:`winnow.settings.resolve_layers`: the same layers, bounds and provenance as a
        method's); ``settings`` holds method settings (n, k, window, ...), resolved by
        :func:`winnow.methods.resolve_settings` over the profile, the file's top level, its
        ``[method]`` table, these and ``more_settings`` (an integration's ``settings=`` mapping, its
        refusals naming ``settings['k']``). Unknown keys in the file, settings the method does not
        have and values of the wrong type are errors naming the key. With ``agents_for_method``, an
        agent role the method does not have is refused (a server, whose requests choose their
        method, keeps roles for the methods that have them).
        """
        from .methods import check_agent_roles, resolve_settings

        file_settings = read_config(config) if config else {}
        if config:
            check_config_keys(file_settings, config)
            endpoints = file_settings.get("base_url")
            if isinstance(endpoints, list) and all(isinstance(url, str) for url in endpoints):
                file_settings["base_url"] = ",".join(endpoints)  # a list of endpoints, as --base-url repeated
        given = {key: value for key, value in (run or {}).items() if value is not None}
        file_layers = [SettingsLayer(f"config {Path(config).name}", file_settings, partial=True,
                                     origin=str(config))] if config else []
        run_layer = SettingsLayer(FLAGS_SOURCE, {key: value for key, value in given.items() if key in RUN_SETTINGS})
        knobs = resolve_layers(RunSettings, [*file_layers, run_layer], owner="the run")
        tables: dict[str, Any] = {key: file_settings[key] for key in RUN_TABLES if file_settings.get(key) is not None}
        tables.update({key: value for key, value in given.items() if key in RUN_TABLES})
        agents = agent_models(tables.get("agents") or {}, config or "agents")
        for option_name, role in ROLE_OPTIONS.items():
            if tables.get(option_name):
                agents.update(agent_models({role: tables[option_name]}, config or option_name))
        spec = cls(**knobs.settings.to_dict(), agents=agents)
        spec.ann, spec.ann_set = checked_ann(spec.ann, tables.get("ann_set"), spec.retriever, config or "--ann-set")
        layers = config_layers(file_settings, spec.method, config) if config else []
        layers.append(SettingsLayer(FLAGS_SOURCE, settings or {}))
        layers += [more_settings] if more_settings is not None else []
        resolved = resolve_settings(spec.method, layers, profile=spec.profile or None)
        spec.settings = resolved.overrides()
        spec.provenance = {**knobs.provenance, **resolved.provenance}
        if agents_for_method:
            check_agent_roles(spec.method, spec.agents)
        return spec

    def method_settings(self) -> MethodSettings:
        """The method's full typed settings (defaults included), as the method will run with them."""
        from .methods import method_settings

        return method_settings(self.method, **self.settings)

    def to_dict(self) -> dict[str, Any]:
        """The spec as run folders record it. MAIN-RAG's roles keep their older keys
        (``judge_model``, ``final_model``) so that run folders made before roles were typed resume."""
        # Options added after run folders existed are left out at their default, so those folders resume.
        # Slots are recorded when there are several: scores then differ slightly from one slot's.
        described = {key: value for key, value in asdict(self).items()
                     if key not in ("agents", "max_inflight", "timeout", "hedge", "provenance")
                     and not (key in ("context_size", "profile", "first_stage_run", "ann", "ann_set", "tokenizer")
                              and not value)
                     and not (key == "slots" and (value or 1) == 1)}
        described.update({name: self.agents.get(role) for name, role in ROLE_OPTIONS.items()})
        others = {role: model for role, model in self.agents.items() if role not in ROLE_OPTIONS.values()}
        if others:
            described["agents"] = others
        return described




def setting_example(name: str, method: str | None = None) -> str | None:
    """A value setting ``name`` accepts (a run option's; else ``method``'s own, where it has the
    setting: no-retrieval's k is 0, none of the others' values; else the first method's), for hints."""
    from .methods import METHODS

    own = METHODS[method].Settings if method in METHODS else None
    if own is not None and name in own.field_types() and name not in RunSettings.field_types():
        return own.example(name)
    owners: list[type[Settings]] = [RunSettings, *(m.Settings for m in METHODS.values())]
    return next((shown for owner in owners if (shown := owner.example(name)) is not None), None)


def resolve_run(options: RunOptions, *, agents_for_method: bool = True,
                settings: SettingsLayer | None = None) -> RunSpec:
    """The RunSpec of a front door's options, the one resolver of every front door (the command
    line, the Python API, the framework adapters, ``winnow serve`` and ``winnow mcp``): the config
    file, then ``--set`` values and named flags (run options such as ``model=`` and method settings
    such as ``n=`` alike), then ``settings`` (an adapter's ``settings=`` mapping as a layer). A value
    given both by ``--set`` and by its own flag must agree; two different values are refused rather
    than one silently winning."""
    example = functools.partial(setting_example, method=options.method)  # hints with the run's method's values
    assigned = dict(parse_assignment(a, example) for a in options.assignments or ())
    named = {f.name: getattr(options, f.name) for f in fields(options)
             if f.name not in _NOT_IN_SPEC and getattr(options, f.name) is not None}
    for key in sorted(assigned.keys() & named.keys()):
        if assigned[key] != named[key]:
            flag = fields_by_name()[key].metadata["flags"][0]
            raise WinnowError(f"--set {key}={assigned[key]!r} and {flag} {named[key]!r} disagree",
                              "give the value once")
    values = {**assigned, **named}
    if isinstance(values.get("ann_set"), (list, tuple)):  # --ann-set repeated: NAME=VALUE each
        from .index.ann import parse_assignments

        values["ann_set"] = parse_assignments(list(values["ann_set"]))
    if isinstance(values.get("base_url"), (list, tuple)):  # --base-url repeated: the endpoints, comma-separated
        values["base_url"] = ",".join(values["base_url"])
    if options.agents:
        values["agents"] = {**(values.get("agents") or {}), **dict(parse_role(a) for a in options.agents)}
    run = {key: value for key, value in values.items() if key in RUN_SETTINGS or key in RUN_TABLES}
    method_values = {key: value for key, value in values.items() if key not in run}
    return RunSpec.resolve(config=options.config, settings=method_values, run=run,
                           agents_for_method=agents_for_method, more_settings=settings)


def fields_by_name() -> dict[str, Any]:
    """RunOptions' fields by name (their metadata holds flags and help)."""
    return {f.name: f for f in fields(RunOptions)}


def parse_role(text: str) -> tuple[str, str]:
    """``--agent judge=qwen2.5-coder-1.5b`` as (role, model)."""
    role, sep, model = text.partition("=")
    if not sep or not role.strip() or not model.strip():
        raise WinnowError(f"--agent {text!r} is not ROLE=MODEL", "e.g. --agent judge=qwen2.5-coder-1.5b")
    return role.strip(), model.strip()


#: The settings of each ANN index kind that apply when searching (the others shape the index when it is built).
ANN_SEARCH_SETTINGS = {"hnsw": ("efSearch",), "ivfpq": ("nprobe", "refine")}


def checked_ann(kind: Any, values: Any, retriever: str, source: str | Path) -> tuple[str, dict[str, int]]:
    """The run options ``ann`` and ``ann_set`` checked before anything is opened: a known kind, for a
    retriever that searches embeddings, and only settings that apply when searching, as whole numbers."""
    from .index.ann import ANN_KINDS, ann_settings

    kind = kind or ""
    if not isinstance(kind, str) or (kind and kind not in ANN_KINDS):
        raise SettingError("ann", f"--ann {kind!r} is not an ANN index kind", f"choose one of {', '.join(ANN_KINDS)}")
    if values in (None, "", (), []):
        values = {}
    if not isinstance(values, dict):
        raise InputError(source, "ann_set must be a table of setting = value, e.g. efSearch = 512", field="ann_set")
    if kind and retriever not in ("dense", "hybrid"):
        raise SettingError("ann", f"--ann {kind} searches embeddings, but the retriever is {retriever!r}",
                           "add --retriever dense or --retriever hybrid, or leave --ann out")
    if values and not kind:
        raise SettingError("ann_set", "--ann-set changes an ANN index's search settings, but no --ann is given",
                           "add --ann hnsw or --ann ivfpq")
    allowed = ANN_SEARCH_SETTINGS.get(kind, ())
    for name in values:
        if name not in allowed:
            raise SettingError(f"ann.{name}", f"--ann-set {name}: not a search setting of {kind}",
                               f"its search settings are {', '.join(allowed)}; the others are chosen when the "
                               f"index is built (`winnow ann IDX --ann {kind} --ann-set ...`)")
    checked = ann_settings(kind, {name: str(value) for name, value in values.items()}) if kind else None
    return kind, {name: int(getattr(checked, name)) for name in values}


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

    settings = {name for m in METHODS.values() for name in m.Settings.field_types()}
    known = {*RUN_SETTINGS, *RUN_TABLES, *METHODS, *settings}
    unknown = sorted(set(config) - known)
    if unknown:
        raise InputError(path, f"unknown setting(s) {unknown}", hint="`winnow methods` lists every method's settings")
