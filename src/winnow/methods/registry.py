"""The registered methods by name: what every list of methods (help, roles, contract tests) is made from.

Its own module so that the settings resolver (:mod:`.resolution`) can look a method up without
importing the package that imports the resolver.
"""

from __future__ import annotations

from ..errors import WinnowError
from .base import Method
from .baselines import MainRAGUnfiltered, NoRetrieval
from .mainrag import MainRAG
from .rankgpt import RankGPT
from .rankrag import RankRAG
from .rrr import RRR
from .vanilla import VanillaRAG

METHODS: dict[str, type[Method]] = {m.name: m for m in (VanillaRAG, RankRAG, MainRAG, RRR, RankGPT,
                                                                NoRetrieval, MainRAGUnfiltered)}


def method_class(name: str) -> type[Method]:
    if name not in METHODS:
        raise WinnowError(f"unknown method {name!r}", f"choose one of: {', '.join(METHODS)}")
    return METHODS[name]
