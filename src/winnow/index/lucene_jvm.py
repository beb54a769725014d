"""Anserini's Java classes in this process: Java found, the JVM started once, its failures one line.

The Lucene first stage (:mod:`.lucene`) runs Anserini, the Lucene toolkit behind Pyserini (Lin et al.,
"Pyserini", SIGIR 2021), inside this process through pyjnius. The jar is the one ``pyserini==0.21.0``
ships (Anserini 0.21.0, Lucene 9, compiled for Java 11: it runs on Java 11 to 17; Pyserini's later
releases need Java 21). Only Pyserini's JVM set-up (:mod:`pyserini.pyclass`, which puts the jar on the
class path) is imported: its search and index packages import torch, transformers, scikit-learn and
spaCy at the top, none of which the Lucene classes need, so Winnow calls the Java classes Pyserini's
``LuceneSearcher`` and ``LuceneIndexer`` wrap (``SimpleSearcher``, ``SimpleIndexer``) itself.

Java is looked for before pyjnius tries (a JVM that fails to start is a traceback, or worse, a dead
process): ``JAVA_HOME``, else the ``java`` on ``PATH`` followed to its installation, whose ``release``
file says its version. A JVM is started once per process and cannot be restarted: everything Lucene
in one process shares it. ``-Xrs`` leaves SIGINT and SIGTERM to Python (``winnow serve`` drains on
SIGTERM); Anserini's log lines, which log4j would print on stdout (its root logger at debug), are
turned down to warnings.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import WinnowError
from ..extras import require

#: Anserini 0.21.0 is compiled for Java 11; Debian 12's openjdk-17 is what it is tested on here.
MIN_JAVA = 11
PYSERINI = "0.21.0"
INSTALL_JAVA = ("install a Java runtime, 11 to 17 (Debian/Ubuntu: sudo apt-get install openjdk-17-jre-headless), "
                "or set JAVA_HOME to one")
INSTALL_PYSERINI = (f"pip install --no-deps pyserini=={PYSERINI} (its jar is what is needed; its own dependencies "
                    "are not)")
_LIBJVM = ("lib/server/libjvm.so", "lib/server/libjvm.dylib", "jre/lib/amd64/server/libjvm.so")


@dataclass(frozen=True)
class Java:
    """A Java installation: its home folder and its major version (``17``)."""

    home: Path
    version: int


def find_java() -> Java:
    """The Java runtime the JVM will be started from; a :class:`WinnowError` saying what to install if
    there is none, or if it is older than Java 11."""
    given = os.environ.get("JAVA_HOME")
    if given:
        home, where = Path(given), f"JAVA_HOME={given}"
    else:
        binary = shutil.which("java")
        if binary is None:
            raise WinnowError("the Lucene first stage needs Java: JAVA_HOME is not set and there is no java on PATH",
                              INSTALL_JAVA)
        home, where = Path(os.path.realpath(binary)).parent.parent, f"the java on PATH ({binary})"
    if not any((home / name).is_file() for name in _LIBJVM):
        raise WinnowError(f"the Lucene first stage needs Java: {where} holds no Java runtime ({_LIBJVM[0]} is "
                          f"missing under {home})", INSTALL_JAVA)
    version = java_version(home)
    if version is not None and version < MIN_JAVA:
        raise WinnowError(f"the Lucene first stage needs Java {MIN_JAVA} or later; {where} is Java {version}",
                          INSTALL_JAVA)
    return Java(home, version or 0)


def java_version(home: Path) -> int | None:
    """The major version in ``home/release`` (``JAVA_VERSION="17.0.15"`` → 17; ``"1.8.0"`` → 8), or None."""
    try:
        text = (home / "release").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = re.search(r'^JAVA_VERSION="(\d+)(?:\.(\d+))?', text, re.MULTILINE)
    if found is None:
        return None
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major


def pyserini_jar_folder() -> Path:
    """The folder of Pyserini's Anserini jar; a :class:`WinnowError` naming the install if absent."""
    import importlib.util

    spec = importlib.util.find_spec("pyserini")
    if spec is None or not spec.submodule_search_locations:
        raise WinnowError("the Lucene first stage needs Anserini's jar from the Python package pyserini",
                          INSTALL_PYSERINI)
    folder = Path(os.environ.get("ANSERINI_CLASSPATH") or Path(spec.submodule_search_locations[0], "resources", "jars"))
    if not any(folder.glob("anserini-*-fatjar.jar")):
        raise WinnowError(f"the Lucene first stage needs Anserini's jar, and {folder} holds none", INSTALL_PYSERINI)
    return folder


_started: Any = None
_lock = threading.Lock()


def anserini(feature: str = "the Lucene first stage") -> Any:
    """pyjnius's ``autoclass``, with the JVM started on Anserini's jar (once per process).

    Everything missing is one :class:`WinnowError` before the JVM is touched: pyjnius (the ``lucene``
    extra), Pyserini's jar, Java. ``feature`` names what the user asked for, in those messages."""
    global _started
    require("lucene", feature)
    jars = pyserini_jar_folder()
    java = find_java()  # checked even once started: the same answer for the same environment
    with _lock:
        if _started is None:
            _started = _start(java, jars)
    return _started


def _start(java: Java, jars: Path) -> Any:
    import importlib
    import sys

    if "jnius" in sys.modules and "pyserini.pyclass" not in sys.modules:
        raise WinnowError("a Java VM was already started in this process without Anserini's jar",
                          "start Lucene before anything else in the process uses pyjnius")
    os.environ.setdefault("JAVA_HOME", str(java.home))  # where pyjnius looks for libjvm
    os.environ.setdefault("ANSERINI_CLASSPATH", str(jars))
    try:
        import jnius_config

        if not jnius_config.vm_running:
            # One log4j context for the whole JVM: without a caller-sensitive stack walk on Java 17,
            # log4j's default selector may hand Anserini's loggers another context than the one set below.
            jnius_config.add_options("-Xrs", "-Dlog4j2.contextSelector="
                                             "org.apache.logging.log4j.core.selector.BasicContextSelector")
        importlib.import_module("pyserini.pyclass")  # puts the jar on the class path and starts the JVM
        from jnius import autoclass
    except Exception as error:  # pyjnius raises bare Exceptions and SystemErrors when the JVM cannot start
        raise WinnowError(f"the Java VM (Java {java.version} at {java.home}) did not start: "
                          f"{str(error).splitlines()[0] if str(error) else type(error).__name__}", INSTALL_JAVA) \
            from error
    _quiet_logs(autoclass)
    return autoclass


def _quiet_logs(autoclass: Any) -> None:
    """Anserini's INFO lines go to stdout through log4j, where ``--json`` output goes: warnings only.
    log4j's own start-up warning about Java 17's stack walking goes to stderr: not shown either."""
    system = autoclass("java.lang.System")
    stderr = system.err
    system.setErr(autoclass("java.io.PrintStream")(autoclass("java.io.OutputStream").nullOutputStream()))
    try:
        level = autoclass("org.apache.logging.log4j.Level")
        autoclass("org.apache.logging.log4j.core.config.Configurator").setRootLevel(level.WARN)
    finally:
        system.setErr(stderr)
