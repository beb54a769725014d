"""The open pipeline a run specification describes: the one door of the ask, eval and serve use cases.

A :class:`~winnow.run_spec.RunSpec` is the resolved answer to "which method, with which models,
retriever and settings" (:mod:`winnow.run_spec`). A :class:`Pipeline` opens the index and the
models once and answers many questions with them; :meth:`Pipeline.with_settings` gives the same
index and models under other settings (a sweep's values, a server's requests), so nothing outside
reaches into its parts.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .records import Answer, CandidateList, Query
from .run_spec import (
    DEFAULT_BACKEND,
    DEFAULT_METHOD,
    DEFAULT_MODEL,
    DEFAULT_RETRIEVER,
    ROLE_OPTIONS,
    RunOptions,
    RunSpec,
    resolve_run,
)

if TYPE_CHECKING:
    from .llm.client import LLM
    from .methods import Method, MethodSettings, TrainedRerankers
    from .stages.retrieve import SearchIndex

__all__ = ["DEFAULT_BACKEND", "DEFAULT_METHOD", "DEFAULT_MODEL", "DEFAULT_RETRIEVER", "ROLE_OPTIONS", "Pipeline",
           "RunOptions", "RunSpec", "load_run_llm", "resolve_run"]


def load_run_llm(spec: RunSpec, model: str, *, api_key: str = "", cache: bool | str | Path = True,
                 threads: int | None = None, progress: Callable[[str, int, int], None] | None = None) -> LLM:
    """The model ``model`` (the run's, or an agent role's) as ``spec`` runs it: its backend and
    endpoints, context, slots, calls in flight, per-call timeout, hedging and tokenizer. Every front
    door loads its models here (a :class:`Pipeline`, the framework adapters' method runner), so a run
    option that reaches the spec reaches the backend."""
    from .llm import load_llm

    return load_llm(model, backend=spec.backend, base_url=spec.base_url, api_key=api_key, cache=cache,
                    context_size=spec.context_size, max_inflight=spec.max_inflight, slots=spec.slots,
                    timeout=spec.timeout, progress=progress, threads=threads, tokenizer=spec.tokenizer,
                    hedge=spec.hedge)


class Pipeline:
    """An index, the models and a method, opened once from a :class:`RunSpec`.

    ``loading`` is told the name of each model as it loads (for a spinner); ``progress`` is the
    LLM clients' per-stage progress hook; ``threads`` caps llama.cpp's CPU threads. Close it (or use
    ``with``) to free the models; a pipeline made by :meth:`with_settings` shares its parent's index
    and models and leaves closing them to the parent.
    """

    index: SearchIndex
    llm: LLM
    agents: dict[str, LLM]
    method: Method

    def __init__(self, spec: RunSpec, index_dir: str | Path, *, api_key: str = "", cache: bool | str | Path = True,
                 progress: Callable[[str, int, int], None] | None = None,
                 loading: Callable[[str], Any] | None = None, threads: int | None = None,
                 retriever: SearchIndex | None = None) -> None:
        from .index import open_retriever

        self.spec = spec
        self.index_dir = Path(index_dir)
        # ``retriever``: a first stage given instead of the index's own (a precomputed run).
        self.index = retriever if retriever is not None else open_retriever(
            index_dir, spec.retriever, ann=spec.ann or None, ann_overrides=dict(spec.ann_set))
        self.llms: list[LLM] = []  # every model in use, the method's first (run folders record them in this order)
        self.owns_models = True  # this pipeline loaded them, and closes them

        def llm_for(name: str) -> LLM:
            if loading:
                loading(name)
            llm = load_run_llm(spec, name, api_key=api_key, cache=cache, threads=threads, progress=progress)
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
            self.method = self.method_with(spec.method, spec.settings)
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_parts(cls, spec: RunSpec, index: SearchIndex, llm: LLM, *, agents: dict[str, LLM] | None = None,
                   index_dir: str | Path = "") -> Pipeline:
        """A pipeline over an index and models opened elsewhere (the Python API's, a parent
        pipeline's): ``spec``'s method built over them. The caller keeps closing the models."""
        pipeline = cls.__new__(cls)
        pipeline.spec, pipeline.index_dir, pipeline.index = spec, Path(index_dir), index
        pipeline.llm, pipeline.agents = llm, dict(agents or {})
        pipeline.llms = [llm, *{id(agent): agent for agent in pipeline.agents.values() if agent is not llm}.values()]
        pipeline.owns_models = False
        pipeline.method = pipeline.method_with(spec.method, spec.settings)
        return pipeline

    def with_settings(self, method: str | None = None, settings: dict[str, Any] | None = None) -> Pipeline:
        """This pipeline's index and models under another method or other settings (the spec's
        settings replaced by ``settings``, resolved and checked): a sweep's values, one per pipeline,
        each describing itself truly. The new pipeline does not own the models: close this one."""
        import dataclasses

        from .methods import resolve_settings
        from .settings import SettingsLayer

        chosen = method or self.spec.method
        resolved = resolve_settings(chosen, [SettingsLayer("with_settings", settings or {})])
        spec = dataclasses.replace(self.spec, method=chosen, settings=resolved.overrides(),
                                   provenance=resolved.provenance)
        derived = Pipeline.from_parts(spec, self.index, self.llm, agents=self.agents, index_dir=self.index_dir)
        derived.llms = list(self.llms)  # the same models, in the order run folders record them
        return derived

    def ask(self, question: str | Query) -> Answer:
        """Answer one question (a :class:`~winnow.records.Query` to give it a dialogue history)."""
        return self.method.ask(question)

    def ask_batch(self, questions: list[str | Query]) -> list[Answer]:
        """Answer many questions together, each stage over all of them (see :mod:`winnow.stages.contract`)."""
        return self.method.ask_batch(questions)

    def method_with(self, method: str, settings: dict[str, Any] | MethodSettings, llm: LLM | None = None,
                    agents: dict[str, LLM] | None = None, rerankers: TrainedRerankers | None = None) -> Method:
        """Another method (or other settings) over the same index and models: what a server builds per
        request. ``settings`` are overrides to resolve, or the method's settings already resolved
        (a server's request, resolved once: built as they are). ``llm``/``agents`` default to this
        pipeline's; roles the method lacks are left out. ``rerankers`` are trained rerankers for
        whatever the method reranks with (a server's ``--rerank-model``)."""
        from .methods import agent_roles, build_method, method_class

        own = agent_roles(method)
        chosen = {role: agent for role, agent in (self.agents if agents is None else agents).items() if role in own}
        if isinstance(settings, dict):
            return build_method(method, index=self.index, llm=llm or self.llm, agents=chosen, rerankers=rerankers,
                                **settings)
        return method_class(method)(self.index, llm or self.llm, settings, chosen, rerankers)

    def search(self, query: str | Query, k: int) -> CandidateList:
        """First-stage retrieval alone: the top ``k`` passages of this pipeline's retriever."""
        return self.index.search(query, k=k)

    @property
    def retriever_name(self) -> str:
        return str(getattr(self.index, "name", self.spec.retriever))

    def model_roles(self) -> dict[int, str]:
        """Each loaded model's role by ``id(llm)``: "default" for the method's model, else its agent role."""
        roles = {id(self.llm): "default"}
        roles.update({id(llm): role for role, llm in self.agents.items()})
        return roles

    def describe(self) -> dict[str, Any]:
        """The resolved settings as `--json` output and run folders record them."""
        described: dict[str, Any] = {"model": self.spec.model, "backend": self.spec.backend,
                                     "index": str(self.index_dir), "retriever": self.retriever_name}
        described.update({f"{role}_model": model for role, model in self.spec.agents.items()})
        if self.spec.ann:
            described["ann"] = self.spec.ann
            described.update({"ann_set": dict(self.spec.ann_set)} if self.spec.ann_set else {})
        return described

    def close(self) -> None:
        if self.owns_models:
            for llm in self.llms:
                llm.close()
        self.llms.clear()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
