"""A run folder: what an evaluation run decided, and every question it has finished.

``RUNDIR/config.json`` holds the run's *identity* (method, models, settings, retriever, the question
file's and the index's checksums, the seed) and what is only informational (library versions, the
command line, each session's limit). ``RUNDIR/answers.jsonl`` gets one line per finished question,
appended, flushed and fsynced as it finishes (questions that finish together share one fsync), so a
run killed at any moment loses at most the questions in flight. Resuming reads the finished ids
back, cuts a torn last line (the line being written when the process died), and refuses to continue
when the identity differs: answers from two configurations in one folder would average into a
number that means nothing.
"""

from __future__ import annotations

import json
import os
import platform
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, BinaryIO

from ..atomic import write_json
from ..errors import InputError, WinnowError
from ..version import __version__
from ..writable import cannot_write
from .schema import Metrics, QuestionRecord

FORMAT = "winnow-eval-run"
FORMAT_VERSION = 1
CONFIG = "config.json"
ANSWERS = "answers.jsonl"
ERRORS = "errors.jsonl"  # questions the backend refused, one line per attempt (retried on resume)
METRICS = "metrics.json"
RUNS = "runs"  # TREC run files, one per stage
LIBRARIES = ("xllamacpp", "bm25s", "numpy", "onnxruntime", "ir-measures", "pytrec-eval-terrier", "httpx")


def library_versions() -> dict[str, str]:
    # Winnow's own version from the code that runs (the distribution is winnow-rag; `winnow` on the
    # package index is another project, which metadata.version("winnow") could find instead).
    versions = {"python": platform.python_version(), "winnow": __version__}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def identity_differences(old: object, new: object, prefix: str = "") -> list[str]:
    """Dotted paths where two identities differ, with both values, e.g. ``spec.settings.n: 20 → 10``."""
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        for key in sorted(set(old) | set(new), key=str):
            found += identity_differences(old.get(key), new.get(key), f"{prefix}{key}.")
        return found
    return [] if old == new else [f"{prefix.rstrip('.')}: {json.dumps(old)} → {json.dumps(new)}"]


class RunFolder:
    """The files of one run; see the module notes."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self.config_path = self.path / CONFIG
        self.answers_path = self.path / ANSWERS
        self.errors_path = self.path / ERRORS
        self.metrics_path = self.path / METRICS
        self.runs_path = self.path / RUNS
        self._stream: BinaryIO | None = None
        self._unwritten: list[bytes] = []  # appended with durable=False, written at the next sync
        self._unsynced = False  # written but not yet fsynced
        self.torn_line_dropped = False

    # --- configuration -----------------------------------------------------------------------------

    def read_config(self) -> dict[str, Any] | None:
        if not self.config_path.is_file():
            return None
        config = _read_json(self.config_path, "restore it, or start the run in a new --out folder")
        if not isinstance(config, dict) or config.get("format") != FORMAT or "identity" not in config:
            raise InputError(self.config_path, f"not a Winnow evaluation run config (format {FORMAT!r})",
                             hint="give a new --out folder")
        return config

    def open(self, identity: dict[str, Any], info: dict[str, Any],
             setting_defaults: dict[str, Any] | None = None) -> dict[str, Any]:
        """Start the run, or resume it when ``identity`` matches the recorded one; return the config.

        A folder holding answers but no config, or a config with another identity, is refused. A
        setting the method gained after the run started (absent from the recorded identity) is no
        change when the run uses its default, ``setting_defaults[key]``, which reproduces the old
        behaviour; the recorded identity is completed with it.
        """
        config = self.read_config()
        if config is None:
            if self.answers_path.exists():
                raise WinnowError(f"{self.path} holds {ANSWERS} but no {CONFIG}, so its answers cannot be "
                                  "trusted to match this run", "give a new --out folder")
            try:
                self.path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise cannot_write(self.config_path, exc) from exc
            config = {"format": FORMAT, "format_version": FORMAT_VERSION, "created": now(), "identity": identity,
                      **info, "sessions": []}
        else:
            if config.get("format_version") != FORMAT_VERSION:
                raise WinnowError(f"{self.config_path} has run format version {config.get('format_version')!r}; "
                                  f"this Winnow writes version {FORMAT_VERSION}", "start a new --out folder")
            recorded = config["identity"].get("settings")
            if setting_defaults and isinstance(recorded, dict):
                for key, value in setting_defaults.items():
                    recorded.setdefault(key, value)
            changed = identity_differences(config["identity"], identity)
            if changed:
                raise WinnowError(f"{self.path} holds a run with another configuration, so it cannot be resumed "
                                  f"with this one: {'; '.join(changed)}",
                                  "repeat the original command to resume it, or give a new --out folder")
        self.write_config(config)
        return config

    def write_config(self, config: dict[str, Any]) -> None:
        write_json(self.config_path, config)

    # --- answers -----------------------------------------------------------------------------------

    def read_answers(self) -> dict[str, QuestionRecord]:
        """Finished questions by id, in file order. A torn last line (no newline: the question in
        flight when the run was killed) is cut off the file; any other bad line (not JSON, not a
        record of :mod:`.schema`) is an error naming the line and the field."""
        records: dict[str, QuestionRecord] = {}
        if not self.answers_path.is_file():
            return records
        data = self.answers_path.read_bytes()
        complete = data.rfind(b"\n") + 1
        if complete < len(data):
            with self.answers_path.open("r+b") as stream:
                stream.truncate(complete)
                stream.flush()
                os.fsync(stream.fileno())
            self.torn_line_dropped = True
        for number, raw in enumerate(data[:complete].splitlines(), start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except ValueError as exc:
                raise InputError(self.answers_path, f"not valid JSON: {exc}", line=number,
                                 hint="every complete line is written whole; delete the damaged line to re-ask "
                                      "that question") from exc
            parsed = QuestionRecord.from_json(record, path=self.answers_path, line=number)
            # A repeat can only come from a hand edit; the later line wins, one record per question.
            records[parsed.id] = parsed
        return records

    def read_metrics(self) -> Metrics | None:
        """The run's ``metrics.json`` (None before its first finish)."""
        if not self.metrics_path.is_file():
            return None
        return Metrics.from_json(_read_json(self.metrics_path, "rerun its `winnow eval` command"),
                                 path=self.metrics_path)

    def append(self, record: QuestionRecord, *, durable: bool = True) -> None:
        """Append one finished question and make it durable before returning; ``durable=False``
        leaves that to a later :meth:`sync` (many records made durable by one fsync)."""
        self._unwritten.append(json.dumps(record.to_json(), ensure_ascii=False, separators=(",", ":"))
                               .encode("utf-8") + b"\n")
        if durable:
            self.sync()

    def sync(self, *, fsync: bool = True) -> None:
        """Write every appended record and make it durable (one write and one fsync; ``fsync=False``
        writes them only, safe from a crash of the process but not yet of the machine).

        Lines wait in memory until then, not in a file buffer: every system call lets go of the
        GIL, and the thread that writes the records (``winnow eval``'s main thread) then waits
        behind 80 question threads to get it back, about 2 ms a call against a fast server.
        """
        if self._unwritten:
            if self._stream is None:
                self._stream = self.answers_path.open("ab", buffering=0)
            data, self._unwritten = b"".join(self._unwritten), []
            view = memoryview(data)
            while view:  # an unbuffered write may take only part of what it is given
                view = view[self._stream.write(view) or 0:]
            self._unsynced = True
        if fsync and self._unsynced and self._stream is not None:
            os.fsync(self._stream.fileno())
            self._unsynced = False

    def append_error(self, entry: dict[str, Any]) -> None:
        with self.errors_path.open("a", encoding="utf-8") as stream:
            stream.write(json.dumps(entry, ensure_ascii=False) + "\n")

    def close(self) -> None:
        self.sync()
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def __enter__(self) -> RunFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_json(path: Path, hint: str) -> Any:
    """A run file's parsed JSON, or an error naming the file and what to do (``hint``)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise InputError(path, f"not valid JSON: {exc}", hint=hint) from exc
