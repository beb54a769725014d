"""What a run is called and where it departs from the papers: its settings resolved, its label and
its deviations, as ``metrics.json``, ``winnow report`` and a sweep's table print them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..run_spec import RunSpec


def resolved_settings(spec: RunSpec) -> dict[str, Any]:
    """Every setting of the method, defaults included (the spec holds only the overrides)."""
    return dict(spec.method_settings().to_dict())


def run_deviations(spec: RunSpec) -> dict[str, str]:
    """The run's settings that make its method something the paper does not describe: setting -> why
    (:meth:`MethodSettings.deviations`, e.g. RRR with ``rerank=pointwise``), and those its backend
    brings (:meth:`MethodSettings.backend_deviations`, e.g. RRR's σ prompt on ``--backend openai``)."""
    settings = spec.method_settings()
    return {**settings.deviations(), **settings.backend_deviations(spec.backend)}


def run_label(spec: RunSpec) -> str:
    """"rankrag qwen2.5-coder-1.5b N=10 k=5", plus each agent role given its own model
    ("judge=qwen2.5-coder-1.5b") and every other setting changed from the method's
    defaults ("α=0.5", "listwise_prompt=rankgpt"), so that two different runs never share a label.
    A run from a profile says so ("profile=paper") and lists the settings changed from the profile's;
    a setting that departs from the paper is marked: "rerank=pointwise (not the paper's)"."""
    from ..methods import method_class, method_settings

    settings = resolved_settings(spec)
    profile = spec.profile
    defaults = method_settings(spec.method, profile=profile or None).to_dict()
    deviations = run_deviations(spec)
    parts = [spec.method, spec.model]
    # A role on its own model ("judge=qwen2.5-coder-1.5b") is another run than the same method on one model.
    parts += [f"{role}={model}" for role, model in sorted(spec.agents.items())
              if model and model != spec.model]
    parts += [f"profile={profile}"] if profile else []
    unused = method_class(spec.method).unused_settings  # vanilla retrieves k
    if "n" not in unused:
        parts.append(f"N={settings.get('n')}")
    if "k" not in unused and settings.get("k") is not None:  # MAIN-RAG's k is None: every survivor
        parts.append(f"k={settings.get('k')}")
    for key, value in settings.items():
        if key not in ("n", "k") and value != defaults.get(key):
            parts.append(f"α={value:g}" if key == "fusion_alpha" else f"{key}={value}")
            if key in deviations:
                parts[-1] += " (not the paper's)"
    if spec.retriever != "bm25":
        parts.append(spec.retriever)
    return " ".join(parts)
