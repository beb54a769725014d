"""Recipes as values: stages composed with ``>>`` (then) and ``%`` (the top k), printed as written.

A method's recipe is one value, built once from its stages::

    recipe = Retriever(index, n=20) >> PointwiseTrueReranker(llm, keep=5) >> ScoreFusion(0.0, ...) % 5 >> Reader(llm)
    recipe.run(batch)     # each stage over the whole batch, in order (a Recipe is itself a stage)
    repr(recipe)          # "Retriever(index='bm25', n=20) >> PointwiseTrueReranker(keep=5) >> ... % 5 >> Reader()"

``a >> b`` runs ``b`` on what ``a`` left; ``a % k`` passes on the top ``k`` of ``a``'s lists (a
:class:`KeepTop` after ``a``, which records nothing). Composition is flat: ``(a >> b) >> c`` and
``a >> (b >> c)`` are the same three steps. The idea is PyTerrier's (Macdonald and Tonellotto,
"Declarative Experimentation in Information Retrieval using PyTerrier", ICTIR 2020: transformers
composed by operators); the settings stay Winnow's typed ones, resolved before any stage is built.

The repr is the recipe a trace records and a reader compares runs by: each step as its class with
the arguments that differ from the class's defaults (numbers, choices, and the name of a prompt
template, an index or a trained reranker; never a model object), so two recipes that print alike
run alike. This module needs nothing from :mod:`.contract` (which builds its ``ListStage`` on
:class:`Composable`), so the two import in one direction only.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields, is_dataclass
from typing import Any, Iterator, Protocol, Sequence, overload, runtime_checkable


@runtime_checkable
class Step(Protocol):
    """What a recipe composes: anything with a ``name`` and the stage verb ``run(batch)``."""

    name: str

    def run(self, batch: Sequence[Any]) -> None: ...


def label(step: object) -> str:
    """How ``step`` prints inside a recipe (its own ``label()``, else its class and name)."""
    own = getattr(step, "label", None)
    if callable(own):
        return str(own())
    return f"{type(step).__name__}(name={getattr(step, 'name', '?')!r})"


def _shown(value: object) -> str | None:
    """An argument as a recipe prints it, or None for what it leaves out (a model, a callable)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    if callable(getattr(value, "label", None)):
        return label(value)
    name = getattr(value, "name", None)  # a prompt template, an index, a trained reranker
    return repr(name) if isinstance(name, str) else None


def _default(spec: Any) -> object:
    if spec.default is not MISSING:
        return spec.default
    if spec.default_factory is not MISSING:
        return spec.default_factory()
    return MISSING


def arguments(step: object) -> list[str]:
    """``field=value`` for each dataclass field of ``step`` that prints and differs from its default."""
    if not is_dataclass(step):
        return []
    shown = []
    for spec in fields(step):
        value = _shown(getattr(step, spec.name))
        default = _default(spec)
        if value is not None and (default is MISSING or _shown(default) != value):
            shown.append(f"{spec.name}={value}")
    return shown


class Composable:
    """Gives a stage the composition operators and its recipe label (``ListStage`` and the other
    stages inherit it)."""

    def __rshift__(self, other: Step) -> Recipe:
        return Recipe.of(self, other)  # type: ignore[arg-type]  # every subclass is a Step

    def __rrshift__(self, other: Step) -> Recipe:
        return Recipe.of(other, self)  # type: ignore[arg-type]

    def __mod__(self, k: int) -> Recipe:
        return Recipe.of(self, KeepTop(k))  # type: ignore[arg-type]

    def label(self) -> str:
        return f"{type(self).__name__}({', '.join(arguments(self))})"


@dataclass
class KeepTop(Composable):
    """Pass on the top ``k`` of each list (the reader's k): what ``stage % k`` appends. Records
    nothing: the cut is the next stage's input, and a reranker that cut its own list keeps its whole
    order in its details."""

    k: int
    name: str = "keep_top"

    def run(self, batch: Sequence[Any]) -> None:
        for state in batch:
            state.candidates = state.ranked.truncated(self.k)


class Recipe(Composable):
    """Steps run in order over a batch; a stage itself (``name`` "recipe"), so recipes nest."""

    name = "recipe"

    def __init__(self, steps: Sequence[Step] = ()) -> None:
        self.steps: tuple[Step, ...] = tuple(steps)

    @classmethod
    def of(cls, *parts: Step) -> Recipe:
        """The steps of ``parts`` in order, a recipe among them spliced in (composition is flat)."""
        steps: list[Step] = []
        for part in parts:
            if not isinstance(part, Step):
                raise TypeError(f"{part!r} is not a stage: a recipe composes objects with a name and run(batch)")
            steps.extend(part.steps if isinstance(part, Recipe) else [part])
        return cls(steps)

    def run(self, batch: Sequence[Any]) -> None:
        for step in self.steps:
            step.run(batch)

    def without(self, kind: type) -> Recipe:
        """This recipe less its steps of ``kind`` (the reader, for the passages a method would answer from)."""
        return Recipe([step for step in self.steps if not isinstance(step, kind)])

    def label(self) -> str:
        return f"({self!r})" if len(self.steps) > 1 else repr(self)

    def __repr__(self) -> str:
        text = ""
        for step in self.steps:
            if isinstance(step, KeepTop) and text:
                text += f" % {step.k}"
            else:
                text += (" >> " if text else "") + label(step)
        return text or "Recipe()"

    def __iter__(self) -> Iterator[Step]:
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    @overload
    def __getitem__(self, index: int) -> Step: ...
    @overload
    def __getitem__(self, index: slice) -> Recipe: ...
    def __getitem__(self, index: int | slice) -> Step | Recipe:
        return Recipe(self.steps[index]) if isinstance(index, slice) else self.steps[index]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Recipe) and self.steps == other.steps

    __hash__ = None  # type: ignore[assignment]  # equal by steps, which may change
