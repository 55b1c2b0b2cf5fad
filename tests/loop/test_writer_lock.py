"""The writer lock, with real other processes holding it: the holder is its PID and start time (a reused PID is not
taken for it), a process joins its own hold, home-wide and experiment writers exclude each other, and the loop flow
itself (a deployment's run, with no `aitp run` around it) is refused while another process writes its experiment."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from aitp.lake.errors import LakeError
from aitp.loop import writer_lock as lock
from aitp.loop.writer_lock import (
    Holder,
    WriterBusyError,
    home_writer_lock,
    lock_path,
    process_start,
    read_holder,
    writer_lock,
)
from tests.loop.helpers import lock_held, prefect_read, write_config


def test_a_holder_is_its_pid_and_start_time_not_its_pid_alone():
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        started = process_start(sleeper.pid)
        assert started is not None
        assert Holder(sleeper.pid, started, "sleep").alive()
        assert not Holder(sleeper.pid, started - 100.0, "an earlier process with this PID").alive()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not Holder(sleeper.pid, started, "sleep").alive()


def test_without_flock_the_recorded_holder_decides(tmp_path, monkeypatch):
    """A filesystem without `flock` cannot be mounted here, so the module's `fcntl` is set to None (a fake)."""
    monkeypatch.setattr(lock, "fcntl", None)
    path = lock_path(tmp_path, "e")
    path.parent.mkdir(parents=True)
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        path.write_text(json.dumps({"pid": sleeper.pid, "started": process_start(sleeper.pid), "command": "x"}))
        with pytest.raises(WriterBusyError, match=f"PID {sleeper.pid}"), writer_lock(tmp_path, "e"):
            pass
    finally:
        sleeper.kill()
        sleeper.wait()
    with writer_lock(tmp_path, "e"):  # the holder died: taken over
        assert read_holder(path).pid != sleeper.pid


def _other_process_takes(home, experiment: str | None = None) -> str:
    """Whether a real other process can take the lock now: "took", or its refusal."""
    take = (
        "import sys\nfrom aitp.loop.writer_lock import home_writer_lock, writer_lock, WriterBusyError\n"
        "home, experiment = sys.argv[1:3]\n"
        "try:\n    with home_writer_lock(home) if experiment == '-' else writer_lock(home, experiment):\n"
        "        print('took')\nexcept WriterBusyError as exc:\n    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", take, str(home), experiment or "-"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_process_joins_its_own_hold_and_keeps_it_until_its_outermost_block_ends(tmp_path):
    """`aitp run` holds the lock and then calls the loop flow, which takes it again: no refusal of itself."""
    with writer_lock(tmp_path, "e"):
        with writer_lock(tmp_path, "e"), writer_lock(tmp_path, "e"):
            pass
        assert "already being written" in _other_process_takes(tmp_path, "e")  # the inner end let nothing go
    assert _other_process_takes(tmp_path, "e") == "took"
    assert read_holder(lock_path(tmp_path, "e")) is None  # released names nobody


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_is_another_process_and_joins_none_of_its_parents_holds(tmp_path):
    """A forked child (a worker) that takes the lock is refused, naming its parent: it does not write beside it."""
    with writer_lock(tmp_path, "e"):
        child = os.fork()
        if child == 0:  # the child: exit 0 only when refused in its parent's name
            try:
                with writer_lock(tmp_path, "e"):
                    os._exit(1)
            except WriterBusyError as exc:
                os._exit(0 if f"PID {os.getppid()} " in str(exc) else 2)
            os._exit(3)
        _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_an_experiment_writer_and_a_home_wide_writer_exclude_each_other(tmp_path):
    with lock_held(tmp_path, "e") as run:
        with pytest.raises(WriterBusyError, match=rf"^experiment 'e' in {tmp_path} .* PID {run.pid} "):
            with home_writer_lock(tmp_path):
                pass
        with writer_lock(tmp_path, "other"):  # another experiment is another writer's
            pass
    with lock_held(tmp_path) as repair:
        for experiment in ("e", "other"):
            with pytest.raises(WriterBusyError, match=rf"^home {tmp_path} .* PID {repair.pid} "):
                with writer_lock(tmp_path, experiment):
                    pass
    with home_writer_lock(tmp_path), writer_lock(tmp_path, "e"):  # a home-wide writer may write an experiment
        pass


def test_a_refusal_names_pid_host_and_since_and_a_killed_holders_lock_is_taken_over(tmp_path):
    with lock_held(tmp_path, "e") as holder:
        refusal = _other_process_takes(tmp_path, "e")
        os.killpg(holder.pid, signal.SIGKILL)  # a holder that dies without a word
        holder.wait(timeout=30)
        assert read_holder(lock_path(tmp_path, "e")).pid == holder.pid  # its name stays in the file
        assert _other_process_takes(tmp_path, "e") == "took"
    today = time.strftime("%Y-%m-%d")
    assert f"PID {holder.pid} on {socket.gethostname()} since {today} " in refusal, refusal
    assert f"kill {holder.pid} and try again" in refusal and "`aitp run --resume e`" in refusal
    assert "\n" not in refusal


def test_a_name_that_is_not_an_experiments_locks_nothing(tmp_path):
    with pytest.raises(LakeError, match="bad experiment name"), writer_lock(tmp_path / "home", "../outside"):
        pass
    assert not (tmp_path / "outside").exists() and not (tmp_path / "home").exists()


def test_the_loop_flow_is_refused_while_another_process_writes_its_experiment(prefect_server, tmp_path):
    """A deployment's flow run has no `aitp run` around it: the flow takes the lock itself, before writing."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.loop import loop_flow

    home, config = tmp_path / "home", write_config(tmp_path / "mini.yaml")
    name = f"refused-{os.getpid()}-{time.monotonic_ns()}"
    with lock_held(home, "mini") as holder, temporary_settings({PREFECT_API_URL: prefect_server}):
        before = _files(home)
        try:
            with pytest.raises(WriterBusyError) as refused:
                loop_flow.with_options(flow_run_name=name)(config=str(config), home=str(home))  # as a deployment does
        finally:  # the flow run's logs and events go now, not at exit to a server stopped by then (a minute's retries)
            APILogWorker.drain_all()
            EventsWorker.drain_all()
        assert holder.poll() is None, "the holder ended before the flow was refused: nothing was tested"
        assert _files(home) == before  # nothing written: no config record, lake, registry or checkpoint
    message = str(refused.value)
    assert message.startswith(f"experiment 'mini' in {home} is already being written by PID {holder.pid} ")
    assert "\n" not in message

    async def read(client):
        return await client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[name])))

    (run,) = prefect_read(prefect_server, read)  # a real flow run, failed with the one-line refusal
    assert run.state.is_failed() and "already being written" in run.state.message


def _files(home) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(home)): (p.stat().st_size, p.stat().st_mtime_ns) for p in home.rglob("*")}
