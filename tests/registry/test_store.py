"""The experiment's parent run in a real MLflow store (SQLite): open while a loop runs, ended after it."""

from __future__ import annotations

import pytest

from aitp.registry import Registry


def test_parent_run_ends_with_the_loop_finished_failed_or_killed_and_a_resume_reopens_it(tmp_path):
    registry = Registry(tmp_path)  # one store: creating its schema is most of the test's time
    status = lambda run_id: registry.client.get_run(run_id).info.status  # noqa: E731
    with registry.experiment_run("e") as run_id:
        assert status(run_id) == "RUNNING"
        child = registry.iteration_run("e", 0)
        registry.finish_iteration("e", 0)
    assert status(run_id) == "FINISHED"
    assert registry.client.get_run(child).data.tags["mlflow.parentRunId"] == run_id
    with registry.experiment_run("e") as again:  # a resumed loop: the same parent, running again
        assert again == run_id and status(run_id) == "RUNNING"
    assert status(run_id) == "FINISHED"

    with pytest.raises(RuntimeError, match="stage broke"), registry.experiment_run("f") as failed:
        raise RuntimeError("stage broke")
    assert status(failed) == "FAILED"
    with pytest.raises(KeyboardInterrupt), registry.experiment_run("f"):
        raise KeyboardInterrupt
    assert status(failed) == "KILLED"
