"""How many CPU cores this process may use: the default thread count of every local engine."""

from __future__ import annotations

import os


def available_cores() -> int:
    """CPU cores this process may run on: its affinity mask, which containers, ``taskset`` and a test
    runner's workers narrow (``os.cpu_count()`` counts the machine's, and threads beyond the mask only
    queue on the same cores, which llama.cpp's spinning threads turn into a many-fold slowdown)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)  # macOS, Windows
