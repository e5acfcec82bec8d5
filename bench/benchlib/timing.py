"""CPU and wall clocks for the benches, and the figures they print from them."""

from __future__ import annotations

import gc
import time
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class Clock:
    cpu_s: float = 0.0
    wall_s: float = 0.0

    def __add__(self, other: Clock) -> Clock:
        return Clock(self.cpu_s + other.cpu_s, self.wall_s + other.wall_s)


@contextmanager
def timed(clock: Clock):
    """Add the CPU time (all threads of this process) and wall time of the block to `clock`."""
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        yield clock
    finally:
        clock.cpu_s += time.process_time() - cpu
        clock.wall_s += time.perf_counter() - wall


def rate(count: int, seconds: float) -> float | None:
    return count / seconds if seconds > 0 else None


def rounded(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def figures(docs: int, clock: Clock, **extra) -> dict:
    return {
        "docs": docs,
        "cpu_s": round(clock.cpu_s, 3),
        "wall_s": round(clock.wall_s, 3),
        "docs_per_cpu_s": rounded(rate(docs, clock.cpu_s)),
        **extra,
    }
