"""The options of a Winnow stage as pydantic fields, shared by the pydantic-based adapters.

LangChain's ``BaseDocumentCompressor`` and LlamaIndex's ``BaseNodePostprocessor`` are pydantic
models, so their Winnow subclasses declare the stage's options as fields (checked by pydantic, bad
values a ``ValidationError`` naming the field) and mix in :class:`StageModel`, which holds them
once and opens the :class:`~winnow.integrations.core.Winnower` that does the work. pydantic is in
the core install (typer requires it), so this module imports without either framework.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, TypeVar

from pydantic import BaseModel, Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from .closing import Closing
from .core import ArgumentError, Winnowed, Winnower, check_stage, check_top_k

Dropped = TypeVar("Dropped")


class StageModel(Closing, BaseModel, Generic[Dropped]):
    """A Winnow stage's options (see :class:`~winnow.integrations.core.Winnower`) and its last result.

    ``stage``: pointwise, graded, listwise, embedding, cross-encoder, monot5 (rerankers; the last two load
    ``model`` as the reranker, no LLM) or judge_filter, graded_filter
    (filters). ``llm`` is a :class:`winnow.llm.LLM` on any backend, or ``model`` is loaded with
    ``backend`` ("llama.cpp" or "openai" at ``base_url``); ``judge_llm`` or ``judge_model`` gives
    MAIN-RAG's judge its own. ``top_n`` (the name LangChain's and LlamaIndex's rerankers use) or
    ``top_k`` keeps the best n; ``judge_n`` is the adaptive bar's n (τ = mean − n·std),
    ``max_document_answer_tokens`` Agent-1's answer budget, ``tau`` the graded filter's τ,
    ``window``/``step`` the listwise window. ``on_result`` is called with every call's
    :class:`~winnow.integrations.core.Winnowed` result. With ``lazy`` the model loads at the first call.

    An argument the class does not have (a typo) is refused naming it. The fields dump the whole
    configuration (``model_dump``, LlamaIndex's ``to_dict``): a model handed in as ``llm`` is written
    as its model name, backend and base_url (never an API key), so the dump builds the same stage again.
    """

    stage: str = "pointwise"
    llm: Any = Field(default=None, exclude=True)
    model: str | None = None
    backend: str = "llama.cpp"
    base_url: str | list[str] = ""
    api_key: str = Field(default="", exclude=True, repr=False)
    judge_llm: Any = Field(default=None, exclude=True)
    judge_model: str | None = None
    embedder: Any = Field(default=None, exclude=True)
    top_k: int | None = None
    top_n: int | None = None
    judge_n: float = 0.0
    tau: float = 1.0
    window: int = 10
    step: int = 5
    max_document_answer_tokens: int = 32
    lazy: bool = False
    on_result: Callable[[Winnowed], Any] | None = Field(default=None, exclude=True)

    _winnower: Winnower = PrivateAttr()
    _last: Winnowed | None = PrivateAttr(default=None)
    _last_dropped: list[Any] = PrivateAttr(default_factory=list)

    @field_validator("stage")
    @classmethod
    def _known_stage(cls, stage: str) -> str:
        return check_stage(stage)

    @field_validator("top_k", "top_n")
    @classmethod
    def _positive_top_k(cls, top_k: int | None, info: ValidationInfo) -> int | None:
        return check_top_k(top_k, info.field_name or "top_k")

    @model_validator(mode="before")
    @classmethod
    def _known_arguments(cls, data: Any) -> Any:
        """Refuse an argument the class does not have, naming it (pydantic would pass it over)."""
        if isinstance(data, dict):
            known = set(cls.model_fields) | {f.alias for f in cls.model_fields.values() if f.alias}
            unknown = sorted(key for key in data if isinstance(key, str) and key not in known)
            if unknown:
                raise ArgumentError(unknown[0], f"{cls.__name__} has no argument {unknown[0]!r}",
                                    f"its arguments: {', '.join(sorted(cls.model_fields))}")
        return data

    @model_validator(mode="after")
    def _open(self) -> StageModel[Dropped]:
        if self.top_n is not None and self.top_k is not None and self.top_n != self.top_k:
            raise ArgumentError("top_n", f"top_n={self.top_n} and top_k={self.top_k} disagree",
                                "give one of them (top_n is the frameworks' name, top_k Winnow's)")
        self._winnower = Winnower(self.stage, llm=self.llm, model=self.model, backend=self.backend,
                                  base_url=self.base_url, api_key=self.api_key, judge_llm=self.judge_llm,
                                  judge_model=self.judge_model, embedder=self.embedder,
                                  top_k=self.top_n if self.top_n is not None else self.top_k, judge_n=self.judge_n,
                                  tau=self.tau, window=self.window, step=self.step,
                                  max_document_answer_tokens=self.max_document_answer_tokens, lazy=self.lazy)
        # A model handed in is recorded by name (what a dump must hold to build this stage again).
        config = self._winnower.config()
        for key in ("model", "backend", "base_url", "judge_model"):
            self.__dict__[key] = config[key]
        return self

    @property
    def keep(self) -> int | None:
        """How many the stage keeps: ``top_n`` or ``top_k`` (None: every one it does not drop)."""
        return self._winnower.top_k

    @property
    def last_result(self) -> Winnowed | None:
        """The last call's kept and dropped items, with the reasons and the trace."""
        return self._last

    @property
    def last_dropped(self) -> list[Dropped]:
        """What the last call dropped, with ``winnow_dropped`` (why) in each one's metadata."""
        return list(self._last_dropped)

    def _winnow(self, query: str, texts: list[str], ids: list[str], dropped: Callable[[Winnowed], list[Dropped]]
                ) -> Winnowed:
        """Run the stage, remember the result and what it dropped, and tell ``on_result``."""
        result = self._winnower.run(query, texts, ids=ids)
        self._last, self._last_dropped = result, dropped(result)
        if self.on_result is not None:
            self.on_result(result)
        return result

    def close(self) -> None:
        """Close a model this object loaded itself (not one handed in as ``llm``)."""
        self._winnower.close()
