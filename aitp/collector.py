"""Python's cyclic garbage collector, paused over a block or watched for the time it takes there.

The collector starts a collection by counting objects that survive, and a full one once enough have:
a block that builds hundreds of thousands of lasting objects (a GGUF model read tensor by tensor, a
decoder call's token lists) sets off full collections over the whole heap again and again, and the
loop's flow process has a large heap (`benchmarks/results/history-gpu-recipe.md`). Reference
counting still frees every acyclic object meanwhile, and the first allocation after the block starts
the collection that was held back. A decoder call records how long the collector ran inside it
(`collector_pauses`), so a call slowed by it says so.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection inside the block; the collector's earlier state (on or off) comes back after it."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


@dataclass
class CollectorPauses:
    """Seconds Python's cyclic garbage collector ran, in any thread, while it was watched."""

    seconds: float = 0.0


@contextmanager
def collector_pauses() -> Iterator[CollectorPauses]:
    """Watch the garbage collector for the block: a full collection over a big heap stalls a call."""
    pauses, started = CollectorPauses(), []

    def note(phase: str, info: dict) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            pauses.seconds += time.perf_counter() - started.pop()

    gc.callbacks.append(note)
    try:
        yield pauses
    finally:
        gc.callbacks.remove(note)
