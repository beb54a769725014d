"""A real one-node Ray cluster on this machine for tests and benchmarks: ``ray start --head`` in a
session of its own, stopped (and everything it started killed) on the way out."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
RAY = Path(sys.executable).with_name("ray")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def session_members(session: int) -> list[int]:
    """Every process in ``session`` (Ray's workers have process groups of their own, not sessions)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session:  # after "pid (comm)": state, ppid, pgrp, session
            members.append(int(stat.parent.name))
    return members


@contextmanager
def ray_head(cpus: int = 2, startup_seconds: float = 120, env: dict[str, str] | None = None) -> Iterator[str]:
    """A Ray head node with ``cpus`` CPUs whose workers import this tree's Winnow; yields 127.0.0.1:PORT.
    ``env`` adds to (or, with a value of None, removes from) the environment the head and its workers get."""
    port = free_port()
    temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # short: Ray's socket paths have a length limit
    merged: dict[str, str | None] = {**os.environ, "PYTHONPATH": str(SRC), "RAY_USAGE_STATS_ENABLED": "0",
                                     **(env or {})}
    env = {key: value for key, value in merged.items() if value is not None}
    log_path = temp / "head.log"
    with log_path.open("w") as log:
        head = subprocess.Popen([str(RAY), "start", "--head", "--block", "--port", str(port), "--num-cpus", str(cpus),
                                 "--include-dashboard=false", "--temp-dir", str(temp)],
                                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            deadline = time.monotonic() + startup_seconds
            while "Ray runtime started" not in log_path.read_text():
                if head.poll() is not None:
                    raise RuntimeError(f"ray start failed:\n{log_path.read_text()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the Ray head node did not start in {startup_seconds:.0f} s")
                time.sleep(0.5)
            yield f"127.0.0.1:{port}"
        finally:
            head.send_signal(signal.SIGTERM)
            try:
                # An idle head stops in about 3 s; one whose workers ran jobs waits out Ray's 16 s grace
                # period before killing them itself, which the loop below does sooner.
                head.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            for pid in session_members(head.pid):  # what a slow shutdown left behind
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            head.wait()
