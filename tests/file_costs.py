"""Seconds each test file took, read by conftest.py to start the costliest files first.

Refresh after a full run: ``pytest -n auto --dist loadfile --junitxml=run.xml`` then
``python tests/file_costs.py run.xml`` (rewrites tests/file_costs.json). A file missing from the
table counts as the median file, so a new one is scheduled sensibly before its first refresh.
"""

from __future__ import annotations

import json
import statistics
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

TABLE = Path(__file__).with_suffix(".json")


def file_costs() -> dict[str, float]:
    """``tests/test_x.py`` -> seconds, from the table (empty when there is none)."""
    try:
        return {name: float(seconds) for name, seconds in json.loads(TABLE.read_text(encoding="utf-8")).items()}
    except (OSError, ValueError):
        return {}


def cost_of(path: str, costs: dict[str, float]) -> float:
    return costs.get(path, statistics.median(costs.values()) if costs else 0.0)


def main(junit: str) -> None:
    seconds: dict[str, float] = {}
    for case in ElementTree.parse(junit).iter("testcase"):
        module = case.get("classname", "").split(".")
        if len(module) >= 2:
            path = f"tests/{module[1]}.py"
            seconds[path] = seconds.get(path, 0.0) + float(case.get("time") or 0.0)
    table = {path: round(value, 1) for path, value in sorted(seconds.items(), key=lambda kv: -kv[1])}
    temporary = TABLE.with_suffix(".tmp")
    temporary.write_text(json.dumps(table, indent=0) + "\n", encoding="utf-8")
    temporary.replace(TABLE)
    print(f"{len(table)} files, {sum(table.values()):.0f} s in all, written to {TABLE}")


if __name__ == "__main__":
    main(sys.argv[1])
