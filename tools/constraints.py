"""Write the two constraints files that sit beside pyproject.toml's version ranges.

pyproject.toml declares the ranges Winnow works with; pip resolves them freely for anyone who
installs ``winnow-rag`` beside their own stack. CI and ``make test`` install one exact, tested set
instead, and ``make test-oldest`` installs the floors of the ranges:

``python tools/constraints.py lock``
    Prints ``constraints.txt``: every package that ``winnow-rag[all,test]`` needs, directly or
    through another package, at the version installed in the running interpreter's environment
    (run it with ``.venv/bin/python`` after an upgrade there). Winnow itself and the model and
    corpus packages (``requirements-models*.txt``, installed with ``--no-deps``) are left out.

``python tools/constraints.py oldest``
    Prints the floor of every runtime range (``name>=X`` → ``name==X``), for ``make test-oldest``.
    The test tools (pytest, hypothesis, ...) are left to pip, which picks releases that agree with
    the floors (the newest import-linter needs a newer rich than rich's floor, say): they are not
    what the ranges promise. torch stays at 2.13.0, the only build on this machine's disk
    (any other release is a several-GB CUDA download; pip's cap here admits nothing newer than 2.14.1).

Only the standard library is needed for ``oldest`` (it runs before any venv exists); ``lock`` uses
``packaging``, which every venv with pip has access to through the installed packages here.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Extras whose packages are tools for developing Winnow, not what Winnow runs on.
TOOL_EXTRAS = ("test",)
#: The project's own "everything" extra: a self-reference, not packages.
SELF_EXTRAS = ("all",)
#: Floors that test-oldest does not install, with the version it installs instead, and why: torch's
#: other releases are not on this disk, and the others are floors that another extra's floor raises
#: when every extra is installed together (each is still the floor for its own extra alone).
OLDEST_OVERRIDES = {
    "torch": ("2.13.0", "the CPU build on this machine's disk; other releases are a CUDA download"),
    "tokenizers": ("0.22", "transformers 4.56 (the train extra's floor) needs tokenizers>=0.22"),
    "uvicorn": ("0.31.1", "mcp 2.0 (the mcp extra's floor) needs uvicorn>=0.31.1"),
    "httpx": ("0.25.1", "mcp 2.0's httpcore2 needs h11>=0.16, which httpx 0.25.0's httpcore 0.18 rules out"),
}
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*([^;]*)(;.*)?$")


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def model_packages() -> set[str]:
    names = set()
    for path in ROOT.glob("requirements-models*.txt"):
        for line in path.read_text(encoding="utf-8").splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                names.add(canonical(re.split(r"[=<>!~ \[]", line, maxsplit=1)[0]))
    return names


def lock() -> list[str]:
    """Every distribution winnow-rag[all,test] requires, pinned as installed in this environment."""
    from importlib import metadata

    from packaging.requirements import Requirement

    meta = project()
    own = canonical(meta["name"])
    extras = meta["optional-dependencies"]
    todo = [Requirement(line) for line in meta["dependencies"]]
    for extra, lines in extras.items():
        if extra not in SELF_EXTRAS:
            todo.extend(Requirement(line) for line in lines)
    skip = model_packages() | {own}
    pinned: dict[str, str] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        requirement = todo.pop()
        key = (canonical(requirement.name), frozenset(requirement.extras))
        if key in seen or key[0] in skip:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError:
            sys.exit(f"error: {requirement.name} (needed by {own}) is not installed in {sys.prefix}: "
                     f"install '.[all,test]' there first")
        name = canonical(dist.metadata["Name"])
        # A local version label (torch's +cpu) names the build, not the release: constrain the release.
        pinned[name] = f"{name}=={dist.version.split('+', 1)[0]}"
        for line in dist.requires or []:
            child = Requirement(line)
            wanted = [{"extra": extra} for extra in requirement.extras] or [{"extra": ""}]
            if child.marker is None or any(child.marker.evaluate(env) for env in wanted):
                todo.append(child)
    return [pinned[name] for name in sorted(pinned)]


def release(version: str) -> tuple[int, ...]:
    """The numeric release of a plain version ("2.2.0.3" → (2, 2, 0, 3)), enough to order floors."""
    return tuple(int(part) for part in re.findall(r"\d+", version))


def oldest() -> list[str]:
    """The floor of every runtime range (the test tools are left to pip: see the module's docstring)."""
    meta = project()
    lines = list(meta["dependencies"])
    for extra, requirements in meta["optional-dependencies"].items():
        if extra not in SELF_EXTRAS + TOOL_EXTRAS:
            lines.extend(requirements)
    floors: dict[str, str] = {}
    for line in lines:
        match = REQUIREMENT.match(line)
        if not match:
            sys.exit(f"error: pyproject.toml: cannot read the requirement {line!r}")
        name, specifier = canonical(match.group(1)), match.group(3)
        floor = re.search(r">=\s*([^,\s]+)", specifier)
        if not floor:
            sys.exit(f"error: pyproject.toml: {line!r} has no floor (name>=X); every range needs one")
        # A package in several extras: the highest of its floors is the one all of them admit.
        version = OLDEST_OVERRIDES.get(name, (floor.group(1),))[0]
        floors[name] = max(version, floors.get(name, version), key=release)
    return [f"{name}=={version}" for name, version in sorted(floors.items())]


HEADERS = {
    "lock": ["# The exact set CI and `make test` install: pip install -c constraints.txt -e '.[all,test]'.",
             "# pyproject.toml declares the ranges Winnow works with; this file picks one tested point in them.",
             "# Regenerate after an upgrade in .venv: .venv/bin/python tools/constraints.py lock > constraints.txt"],
    "oldest": ["# The floors of pyproject.toml's ranges, for `make test-oldest` (tools/constraints.py oldest).",
               *(f"# {name}=={version}, not its floor: {why}." for name, (version, why) in OLDEST_OVERRIDES.items())],
}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in HEADERS:
        print("usage: python tools/constraints.py lock|oldest", file=sys.stderr)
        return 2
    lines = lock() if argv[0] == "lock" else oldest()
    print("\n".join([*HEADERS[argv[0]], *lines]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
