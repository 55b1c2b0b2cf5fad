"""Pausing Python's cyclic garbage collector over a block that makes many objects and few garbage cycles.

The collector starts a collection by counting objects that survive, and a full one once enough have:
a block that builds hundreds of thousands of lasting objects (a GGUF model read tensor by tensor, a
decoder call's token lists) sets off full collections over the whole heap again and again. In the
loop's flow process, which holds nearly a million objects, that was seconds a load. Reference
counting still frees every acyclic object meanwhile, and the first allocation after the block starts
the collection that was held back.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


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
