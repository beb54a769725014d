"""The methods by name, with their stages, settings, agent roles and defaults."""

from __future__ import annotations

from typing import Any, Mapping

from ..llm.client import LLM
from ..settings import SettingsLayer
from ..stages.retrieve import SearchIndex
from .base import Method, MethodSettings, check_roles, role_name
from .profiles import PROFILES, Profile, profile_named, profile_settings
from .registry import METHODS, method_class
from .reranking import RERANKERS, TRAINED_RERANKERS, TrainedRerankers, choose_reranker
from .resolution import ResolvedSettings, resolve_settings


def method_settings(name: str, *, profile: str | None = None, **overrides: Any) -> MethodSettings:
    """The method's defaults, then the named ``profile``'s values for it (:mod:`.profiles`, e.g.
    ``"paper"``), then ``overrides`` (``None`` values are ignored), coerced to their types and
    checked; a bad value raises :class:`~winnow.settings.SettingError` naming it."""
    given = {key: value for key, value in overrides.items() if value is not None}
    return resolve_settings(name, [SettingsLayer("python", given)], profile=profile).settings


def build_method(name: str, *, index: SearchIndex, llm: LLM, agents: Mapping[str, LLM] | None = None,
                 profile: str | None = None, rerankers: TrainedRerankers | None = None, **overrides: Any) -> Method:
    """A ready-to-ask method by name, e.g. ``build_method("rankrag", index=idx, llm=llm, n=20, k=5)``.

    ``agents`` gives some roles their own model where the method has such roles, e.g.
    ``{"judge": other}`` for MAIN-RAG's judge (``winnow methods`` lists every method's roles).
    ``rerankers`` gives it trained rerankers, ``{"cross-encoder": "BAAI/bge-reranker-v2-m3"}`` (a
    folder, hub id or loaded model), for whatever it reranks with (:mod:`.reranking`).
    ``profile="paper"`` starts from the paper's settings (:mod:`.profiles`); ``overrides`` win.
    """
    return method_class(name)(index, llm, method_settings(name, profile=profile, **overrides), agents, rerankers)


def agent_roles(name: str) -> dict[str, str]:
    """The agent roles of a method that may run on a model of their own: role -> what it does."""
    return dict(method_class(name).roles)


def check_agent_roles(name: str, roles: Any) -> None:
    """Refuse agent roles the method does not have, naming the roles it has."""
    check_roles(name, agent_roles(name), {role_name(role): None for role in roles})


__all__ = ["METHODS", "PROFILES", "RERANKERS", "TRAINED_RERANKERS", "Method", "MethodSettings", "Profile",
           "ResolvedSettings", "SettingsLayer", "TrainedRerankers", "agent_roles", "build_method", "choose_reranker",
           "resolve_settings", "check_agent_roles", "method_class", "method_settings", "profile_named",
           "profile_settings", "role_name"]
