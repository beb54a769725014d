"""The blend file: which data go into the Stage-II blend, in what proportion (RankRAG §4.2, App. B).

A TOML or YAML file with a few top-level keys and one ``[[component]]`` table per data source::

    seed = 0
    size = 2000                     # examples in the blend; default: the most without repeating any
    eval_sets = ["nq-test", "triviaqa-test"]  # contamination check; default: every QA test set

    [[component]]
    name = "msmarco"
    kind = "ranking"                # context_qa | rag_qa | ranking | rag_ranking | conv_ranking | sft
    path = "triples.train.tsv"      # a data file (relative to this file) ...
    ratio = "ms_marco_ranking"      # a number, or a dataset name from Appendix B

    [[component]]
    name = "nq-rag-qa"
    kind = "rag_qa"
    qa = "nq-dev"                   # ... or questions (a dataset name or QA JSONL file)
    index = "wiki-index"            # mined against a Winnow index: BM25 top `depth`
    # prompt = "inference"          # rag_qa only: D.2's wording instead of the paper's C.2 2)

Ratios are normalised to sum to one, as Appendix B does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import read_config
from ..errors import InputError
from .examples import ANSWER_STYLES, RAG_QA_PROMPTS

# Appendix B: the Stage-II blending ratio of every dataset (normalised before use).
APPENDIX_B_RATIOS: dict[str, float] = {
    "drop": 0.069, "narrativeqa": 0.09, "quoref": 0.026, "ropes": 0.026,
    "squad_rag_qa": 0.09, "squad_rag_ranking": 0.02,
    "webquestions_rag_qa": 0.09, "webquestions_rag_ranking": 0.02,
    "newsqa": 0.09, "tatqa_arithmetic": 0.15, "tatqa_others": 0.08,
    "convqa": 0.2, "ms_marco_ranking": 0.15, "convqa_ranking": 0.03, "sft": 0.2,
}

# A component's ratio when its table gives none: the Appendix B weight of a dataset in the same role.
KINDS: dict[str, str] = {
    "context_qa": "narrativeqa",
    "rag_qa": "squad_rag_qa",
    "ranking": "ms_marco_ranking",
    "rag_ranking": "squad_rag_ranking",
    "conv_ranking": "convqa_ranking",
    "sft": "sft",
}
MINABLE = ("context_qa", "rag_qa", "ranking", "rag_ranking")  # kinds a QA set + an index can supply
COMPONENT_KEYS = {"name", "kind", "path", "qa", "index", "ratio", "depth", "limit", "answer_style", "prompt"}
TOP_KEYS = {"seed", "size", "eval_sets", "component"}
DEFAULT_DEPTH = 20  # BM25 passages searched per mined question
PASSAGES_PER_LIST = 5  # §4.2 parts 3 and 5: "ensuring a total of five contexts"


@dataclass(frozen=True)
class ComponentSpec:
    """One ``[[component]]`` table, checked."""

    name: str
    kind: str
    ratio: float
    ratio_source: str  # "given" or the Appendix B dataset it came from
    path: Path | None = None
    qa: str | None = None
    index: Path | None = None
    depth: int = DEFAULT_DEPTH
    limit: int | None = None  # use at most this many source records (questions, lines)
    answer_style: str = "short"
    prompt: str = "training"  # rag_qa: the paper's training prompt (App. C.2 2) or "inference" (D.2)

    @property
    def mined(self) -> bool:
        return self.qa is not None

    def describe(self) -> dict[str, Any]:
        source = ({"qa": self.qa, "index": str(self.index), "depth": self.depth} if self.mined
                  else {"path": str(self.path)})
        return {"kind": self.kind, "ratio": self.ratio, "ratio_source": self.ratio_source, **source,
                "limit": self.limit, **({"prompt": self.prompt} if self.kind == "rag_qa" else {})}


@dataclass(frozen=True)
class BlendConfig:
    path: Path
    components: list[ComponentSpec]
    seed: int = 0
    size: int | None = None
    eval_sets: list[str] | None = None  # None: the default list
    raw: dict[str, Any] = field(default_factory=dict)

    def shares(self) -> dict[str, float]:
        total = sum(c.ratio for c in self.components)
        return {c.name: c.ratio / total for c in self.components}


def read_blend_config(path: str | Path) -> BlendConfig:
    """Read and check a blend file; every problem names the file and the key at fault."""
    path = Path(path).expanduser()
    data = read_config(path)
    unknown = sorted(set(data) - TOP_KEYS)
    if unknown:
        raise InputError(path, f"unknown key(s) {unknown}", hint=f"known: {sorted(TOP_KEYS)}")
    tables = data.get("component")
    if not isinstance(tables, list) or not tables:
        raise InputError(path, "no [[component]] tables", field="component",
                         hint="add one [[component]] per data source (see docs/training.md)")
    seed = _integer(data, "seed", path, default=0, minimum=0)
    size = _optional_integer(data, "size", path, minimum=1)
    eval_sets = data.get("eval_sets")
    if eval_sets is not None and (not isinstance(eval_sets, list) or not all(isinstance(e, str) for e in eval_sets)):
        raise InputError(path, "eval_sets must be a list of dataset names or QA files", field="eval_sets")
    components = [_component(table, number, path) for number, table in enumerate(tables, start=1)]
    names = [c.name for c in components]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InputError(path, f"component names must be unique; repeated: {repeated}", field="name")
    return BlendConfig(path, components, seed, size, eval_sets, data)


def _optional_integer(table: dict[str, Any], key: str, path: Path, *, minimum: int, where: str = "") -> int | None:
    value = table.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(path, f"{where}{key} must be an integer >= {minimum}, got {value!r}", field=key)
    number: int = value
    return number


def _integer(table: dict[str, Any], key: str, path: Path, *, default: int, minimum: int, where: str = "") -> int:
    value = _optional_integer(table, key, path, minimum=minimum, where=where)
    return default if value is None else value


def _component(table: Any, number: int, path: Path) -> ComponentSpec:
    where = f"component {number}: "
    if not isinstance(table, dict):
        raise InputError(path, f"{where}must be a table", field="component")
    unknown = sorted(set(table) - COMPONENT_KEYS)
    if unknown:
        raise InputError(path, f"{where}unknown key(s) {unknown}", field="component",
                         hint=f"known: {sorted(COMPONENT_KEYS)}")
    kind = table.get("kind")
    if kind not in KINDS:
        raise InputError(path, f"{where}kind must be one of {list(KINDS)}, got {kind!r}", field="kind")
    name = table.get("name", f"{kind}-{number}")
    if not isinstance(name, str) or not name.strip():
        raise InputError(path, f"{where}name must be a non-empty string", field="name")
    ratio, ratio_source = _ratio(table.get("ratio", KINDS[kind]), f"component {name!r}: ", path)
    has_path, has_qa = "path" in table, "qa" in table
    if has_path == has_qa:
        raise InputError(path, f"component {name!r}: give either path (a data file) or qa + index (mined)",
                         field="path")
    base = path.parent
    file_path = qa = index = None
    if has_path:
        file_path = _resolve(base, table["path"], path, "path", name)
        if not file_path.is_file():
            raise InputError(path, f"component {name!r}: data file not found: {file_path}", field="path")
    else:
        if kind not in MINABLE:
            raise InputError(path, f"component {name!r}: kind {kind} cannot be mined from a QA set",
                             field="qa", hint=f"mined kinds: {', '.join(MINABLE)}; give a data file instead")
        if not isinstance(table["qa"], str) or "index" not in table:
            raise InputError(path, f"component {name!r}: qa needs a dataset name or QA file, and an index",
                             field="index")
        qa = table["qa"]
        candidate = base / qa
        if candidate.is_file():  # a QA file next to the config; otherwise a dataset name
            qa = str(candidate)
        index = _resolve(base, table["index"], path, "index", name)
    style = table.get("answer_style", "short")
    if style not in ANSWER_STYLES:
        raise InputError(path, f"component {name!r}: answer_style must be one of {list(ANSWER_STYLES)}",
                         field="answer_style")
    wording = table.get("prompt", "training")
    if wording not in RAG_QA_PROMPTS or (kind != "rag_qa" and "prompt" in table):
        raise InputError(path, f"component {name!r}: prompt must be one of {list(RAG_QA_PROMPTS)}, and only "
                               "for kind rag_qa", field="prompt",
                         hint="training: Appendix C.2 2) (the paper's); inference: Appendix D.2")
    return ComponentSpec(
        name=name, kind=kind, ratio=ratio, ratio_source=ratio_source, path=file_path, qa=qa, index=index,
        prompt=wording,
        depth=_integer(table, "depth", path, default=DEFAULT_DEPTH, minimum=PASSAGES_PER_LIST, where=where),
        limit=_optional_integer(table, "limit", path, minimum=1, where=where), answer_style=style)


def _ratio(value: Any, where: str, path: Path) -> tuple[float, str]:
    if isinstance(value, str):
        if value not in APPENDIX_B_RATIOS:
            raise InputError(path, f"{where}ratio {value!r} is not an Appendix B dataset", field="ratio",
                             hint=f"a number, or one of {sorted(APPENDIX_B_RATIOS)}")
        return APPENDIX_B_RATIOS[value], f"Appendix B: {value}"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise InputError(path, f"{where}ratio must be a positive number, got {value!r}", field="ratio")
    return float(value), "given"


def _resolve(base: Path, value: Any, path: Path, key: str, name: str) -> Path:
    if not isinstance(value, str) or not value.strip():
        raise InputError(path, f"component {name!r}: {key} must be a path", field=key)
    candidate = Path(value).expanduser()
    return candidate if candidate.is_absolute() else base / candidate
