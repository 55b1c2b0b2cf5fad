"""The GGUF conversion cache: one complete copy per file content, written atomically, never required."""

import os
import time
from pathlib import Path

import pytest

from aitp.policies import gguf_cache


class _Saved:
    """Stands in for a model or tokenizer: `save_pretrained` writes the files a copy is checked for."""

    def __init__(self, files: dict[str, str], fail_after: int | None = None) -> None:
        self.files, self.fail_after = files, fail_after

    def save_pretrained(self, where: Path) -> None:
        for i, (name, body) in enumerate(self.files.items()):
            if self.fail_after is not None and i >= self.fail_after:
                raise OSError("No space left on device")
            (Path(where) / name).write_text(body)


MODEL = {"config.json": "{}", "model.safetensors": "weights"}
TOKENIZER = {"tokenizer.json": "{}"}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "aitp" / "gguf"


def test_the_first_load_writes_the_copy_and_later_ones_do_not_load_the_gguf(cache, tmp_path):
    gguf, loads = tmp_path / "m.gguf", []

    def load():
        loads.append(1)
        return _Saved(MODEL), _Saved(TOKENIZER)

    copy = gguf_cache.convert(gguf, "abc123", load)
    assert copy == cache / "m-abc123" and sorted(p.name for p in copy.iterdir()) == sorted([*MODEL, *TOKENIZER])
    assert gguf_cache.convert(gguf, "abc123", load) == copy and len(loads) == 1
    assert [p.name for p in cache.iterdir()] == ["m-abc123"]  # no staging directory left behind


def test_other_content_gets_its_own_copy(cache, tmp_path):
    gguf = tmp_path / "m.gguf"
    first = gguf_cache.convert(gguf, "aaa", lambda: (_Saved(MODEL), _Saved(TOKENIZER)))
    second = gguf_cache.convert(gguf, "bbb", lambda: (_Saved(MODEL), _Saved(TOKENIZER)))
    assert first != second and gguf_cache.is_complete(first) and gguf_cache.is_complete(second)


def test_a_write_that_fails_midway_leaves_no_copy_and_the_gguf_is_read_instead(cache, tmp_path):
    gguf = tmp_path / "m.gguf"
    assert gguf_cache.convert(gguf, "abc", lambda: (_Saved(MODEL, fail_after=1), _Saved(TOKENIZER))) is None
    assert list(cache.iterdir()) == []
    copy = gguf_cache.convert(gguf, "abc", lambda: (_Saved(MODEL), _Saved(TOKENIZER)))  # the next load writes it
    assert gguf_cache.is_complete(copy)


def test_a_copy_put_in_place_by_another_process_meanwhile_is_the_one_kept(cache, tmp_path):
    gguf = tmp_path / "m.gguf"

    def load_while_another_process_finishes():
        gguf_cache.convert(gguf, "abc", lambda: (_Saved({**MODEL, "by": "other"}), _Saved(TOKENIZER)))
        return _Saved(MODEL), _Saved(TOKENIZER)

    copy = gguf_cache.convert(gguf, "abc", load_while_another_process_finishes)
    assert (copy / "by").read_text() == "other" and [p.name for p in cache.iterdir()] == ["m-abc"]


def test_an_unwritable_cache_costs_only_the_speed_up(tmp_path, monkeypatch):
    (tmp_path / "not-a-directory").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "not-a-directory"))
    loads = []
    assert gguf_cache.convert(tmp_path / "m.gguf", "abc", lambda: loads.append(1)) is None and loads == []


def test_a_model_left_in_gguf_blocks_is_not_copied(cache, tmp_path):
    assert gguf_cache.convert(tmp_path / "m.gguf", "abc", lambda: None) is None
    assert list(cache.iterdir()) == []


def test_what_a_killed_conversion_left_is_removed_once_stale_and_a_live_one_is_not(cache, tmp_path):
    cache.mkdir(parents=True)
    stale, live = cache / ".m-abc.dead", cache / ".m-abc.busy"
    for d in (stale, live):
        d.mkdir()
        (d / "model.safetensors").write_text("half")
    old = time.time() - 2 * gguf_cache.STALE_STAGING_S
    os.utime(stale, (old, old))
    copy = gguf_cache.convert(tmp_path / "m.gguf", "abc", lambda: (_Saved(MODEL), _Saved(TOKENIZER)))
    assert sorted(p.name for p in cache.iterdir()) == [".m-abc.busy", "m-abc"] and gguf_cache.is_complete(copy)


def test_the_collector_is_paused_while_the_gguf_is_read_and_saved_and_on_again_after(cache, tmp_path):
    import gc

    seen = []

    class _Watched(_Saved):
        def save_pretrained(self, where: Path) -> None:
            seen.append(gc.isenabled())
            super().save_pretrained(where)

    def load():
        seen.append(gc.isenabled())
        return _Watched(MODEL), _Watched(TOKENIZER)

    was_on = gc.isenabled()
    gc.enable()
    try:
        assert gguf_cache.is_complete(gguf_cache.convert(tmp_path / "m.gguf", "abc", load))
        assert seen == [False, False, False] and gc.isenabled()
    finally:
        (gc.enable if was_on else gc.disable)()
