"""The methods by name, with their stages and defaults."""

from __future__ import annotations

import inspect
from dataclasses import fields
from typing import Any

from ..errors import WinnowError
from ..llm.client import LLM
from ..stages.retrieve import SearchIndex
from .base import Method, MethodSettings
from .mainrag import MainRAG
from .rankgpt import RankGPT
from .rankrag import RankRAG
from .rrr import RRR
from .vanilla import VanillaRAG

METHODS: dict[str, type[Method]] = {m.name: m for m in (VanillaRAG, RankRAG, MainRAG, RRR, RankGPT)}


def method_class(name: str) -> type[Method]:
    if name not in METHODS:
        raise WinnowError(f"unknown method {name!r}", f"choose one of: {', '.join(METHODS)}")
    return METHODS[name]


def method_settings(name: str, **overrides: Any) -> MethodSettings:
    """The method's defaults with ``overrides`` applied (``None`` values are ignored)."""
    settings_type = method_class(name).Settings
    known = {f.name for f in fields(settings_type)}
    unknown = sorted(k for k, v in overrides.items() if v is not None and k not in known)
    if unknown:
        raise WinnowError(f"method {name!r} has no setting(s) {unknown}", f"known settings: {sorted(known)}")
    settings = settings_type(**{k: v for k, v in overrides.items() if v is not None})
    settings.validate(name)
    return settings


def build_method(name: str, *, index: SearchIndex, llm: LLM, agents: dict[str, LLM] | None = None,
                 **overrides: Any) -> Method:
    """A ready-to-ask method by name, e.g. ``build_method("rankrag", index=idx, llm=llm, n=20, k=5)``.

    ``agents`` gives some roles their own model where the method has such roles, e.g.
    ``{"judge_llm": other}`` for MAIN-RAG's judge.
    """
    agents = agents or {}
    check_agent_roles(name, agents)
    return method_class(name)(index, llm, method_settings(name, **overrides), **agents)


def agent_roles(name: str) -> set[str]:
    """The agent roles (``judge_llm``, ``final_llm``) the method can give a model of their own."""
    return {p for p in inspect.signature(method_class(name).__init__).parameters if p.endswith("_llm")}


def check_agent_roles(name: str, roles: Any) -> None:
    """Refuse agent roles the method does not have, naming the command-line option."""
    misplaced = sorted(set(roles) - agent_roles(name))
    if misplaced:
        options = ", ".join("--" + role.replace("_llm", "-model") for role in misplaced)
        raise WinnowError(f"method {name!r} has no separate {', '.join(misplaced)}",
                          f"{options} applies to methods with such agents (mainrag)")


__all__ = ["METHODS", "Method", "MethodSettings", "agent_roles", "build_method", "check_agent_roles", "method_class", "method_settings"]
