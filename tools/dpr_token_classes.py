"""Writes DPR's token classes for the running Python's Unicode version into
src/winnow/dpr_token_classes.json (kept beside those of other versions).

Run it under each Python Winnow supports when a new one comes out:
    PYTHONPATH=src python3.13 tools/dpr_token_classes.py
"""

from __future__ import annotations

import json
import unicodedata

from winnow.answers import TOKEN_CLASSES_FILE, build_token_classes
from winnow.atomic import write_text


def main() -> None:
    stored = json.loads(TOKEN_CLASSES_FILE.read_text("utf-8")) if TOKEN_CLASSES_FILE.exists() else {}
    stored[unicodedata.unidata_version] = list(build_token_classes())
    write_text(TOKEN_CLASSES_FILE, json.dumps(dict(sorted(stored.items())), ensure_ascii=True, indent=0) + "\n")
    print(f"{TOKEN_CLASSES_FILE}: Unicode {', '.join(sorted(stored))}")


if __name__ == "__main__":
    main()
