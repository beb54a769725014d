"""A run specification and the open pipeline it describes: what `ask`, `eval` and `serve` share.

A :class:`RunSpec` is the resolved answer to "which method, with which models, retriever and
settings" (config file < flags, checked before any model loads). A :class:`Pipeline` opens the
index and the models once and answers many questions with them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

from .config import RUN_OPTIONS, read_config, resolve
from .errors import InputError
from .records import Answer

DEFAULT_METHOD = "rankrag"
DEFAULT_MODEL = "qwen2.5-coder-1.5b"
DEFAULT_BACKEND = "llama.cpp"
DEFAULT_RETRIEVER = "bm25"
AGENT_ROLES = ("judge_model", "final_model")  # MAIN-RAG's agents that may run on another model


@dataclass
class RunSpec:
    """Everything that decides a run's answers (the API key aside, which is never recorded)."""

    method: str = DEFAULT_METHOD
    model: str = DEFAULT_MODEL
    backend: str = DEFAULT_BACKEND
    base_url: str = ""
    retriever: str = DEFAULT_RETRIEVER
    judge_model: str | None = None
    final_model: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)  # method setting overrides, checked

    @classmethod
    def resolve(cls, *, config: str | Path | None = None, run: dict[str, Any] | None = None,
                settings: dict[str, Any] | None = None, agents_for_method: bool = True) -> RunSpec:
        """Merge a config file (TOML/YAML) with explicit values; explicit values that are not None win.

        ``run`` holds run options (method, model, backend, base_url, retriever, judge_model,
        final_model); ``settings`` holds method settings (n, k, window, ...). Unknown keys in the
        file, and settings the method does not have, are errors naming the file and key. With
        ``agents_for_method``, a judge or final model for a method without such agents is refused
        (a server, whose requests choose their method, keeps them for the methods that have them).
        """
        from .methods import check_agent_roles, method_class, method_settings

        file_settings = read_config(config) if config else {}
        if config:
            check_config_keys(file_settings, config)
        chosen = {key: file_settings.get(key) for key in RUN_OPTIONS if key != "api_key"}
        chosen.update({key: value for key, value in (run or {}).items() if value is not None})
        spec = cls(**{key: value for key, value in chosen.items() if value is not None and key in _SPEC_FIELDS})
        spec.settings = resolve(method_class(spec.method).Settings, spec.method, file_settings, settings or {},
                                config or "config")
        method_settings(spec.method, **spec.settings)  # fail fast, before loading a model
        if agents_for_method:
            check_agent_roles(spec.method, [role.replace("_model", "_llm") for role in AGENT_ROLES if getattr(spec, role)])
        return spec

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_SPEC_FIELDS = {f.name for f in fields(RunSpec)}


def check_config_keys(config: dict[str, Any], path: str | Path) -> None:
    """Refuse keys that are neither run options, method names nor any method's settings."""
    from .methods import METHODS

    known = set(RUN_OPTIONS) | set(METHODS) | {f.name for m in METHODS.values() for f in fields(m.Settings)}
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
                 loading: Callable[[str], Any] | None = None, threads: int | None = None) -> None:
        from .index import open_retriever
        from .llm import load_llm
        from .methods import agent_roles, build_method

        self.spec = spec
        self.index_dir = Path(index_dir)
        self.index = open_retriever(index_dir, spec.retriever)
        self.llms: list[Any] = []

        def llm_for(name: str):
            if loading:
                loading(name)
            llm = load_llm(name, backend=spec.backend, base_url=spec.base_url, api_key=api_key, cache=cache,
                           progress=progress, threads=threads)
            self.llms.append(llm)
            return llm

        try:
            self.llm = llm_for(spec.model)
            agents = {role.replace("_model", "_llm"): llm_for(getattr(spec, role))
                      for role in AGENT_ROLES if getattr(spec, role) and getattr(spec, role) != spec.model}
            self.agents = agents  # role -> LLM, for methods built per request (winnow serve)
            own = agent_roles(spec.method)
            self.method = build_method(spec.method, index=self.index, llm=self.llm,
                                       agents={role: llm for role, llm in agents.items() if role in own},
                                       **spec.settings)
        except BaseException:
            self.close()
            raise

    def ask(self, question: str) -> Answer:
        return self.method.ask(question)

    def describe(self) -> dict[str, Any]:
        """The resolved settings as `--json` output and run folders record them."""
        described = {"model": self.spec.model, "backend": self.spec.backend, "index": str(self.index_dir),
                     "retriever": getattr(self.index, "name", self.spec.retriever)}
        described.update({role: getattr(self.spec, role) for role in AGENT_ROLES if getattr(self.spec, role)})
        return described

    def close(self) -> None:
        for llm in self.llms:
            llm.close()
        self.llms.clear()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
