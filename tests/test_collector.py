"""The cyclic garbage collector paused (off inside the block, as it was after it) and watched (its seconds there)."""

import gc

import pytest

from aitp.collector import collector_paused, collector_pauses


@pytest.fixture(autouse=True)
def _collector_restored():
    was_on = gc.isenabled()
    yield
    (gc.enable if was_on else gc.disable)()


def test_the_collector_is_off_inside_and_on_again_after():
    gc.enable()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off():
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_an_error_in_the_block_still_turns_the_collector_back_on():
    gc.enable()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_no_collection_runs_inside_however_many_cycles_are_made():
    gc.enable()
    runs = []

    def note(phase, info):
        if phase == "start":
            runs.append(info["generation"])

    try:
        with collector_paused():
            gc.callbacks.append(note)  # from inside: making the context manager may itself start a collection
            for _ in range(50_000):  # cycles: each counts towards a collection
                a = []
                a.append(a)
            assert runs == []
        for _ in range(50_000):
            a = []
            a.append(a)
        assert runs  # the same work outside the block is collected
    finally:
        gc.callbacks.remove(note)


def test_collector_pauses_are_the_collections_run_inside_the_block():
    callbacks = list(gc.callbacks)
    with collector_pauses() as quiet:
        pass
    with collector_pauses() as busy:
        cycles = [[] for _ in range(100_000)]
        for c in cycles:
            c.append(c)
        del cycles
        gc.collect()
    assert quiet.seconds == 0 < busy.seconds and gc.callbacks == callbacks
