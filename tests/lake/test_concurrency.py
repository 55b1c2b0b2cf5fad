"""Writer processes side by side, and a reader while a partition is being rewritten."""

import subprocess
import sys

from aitp.lake import check_lake, connect, write_partition
from tests.lake.helpers import REPO, rollout_rows

WRITER = """
import sys, time
from aitp.lake import write_partition
from tests.lake.helpers import rollout_rows

home, experiment, iteration, shard, n_items, rounds, pause = sys.argv[1:8]
for r in range(int(rounds)):
    # alternate sizes, so a half-applied commit would show up as a count outside the two
    items = int(n_items) if r % 2 == 0 else 2 * int(n_items)
    write_partition(home, "rollouts", experiment, int(iteration), rollout_rows(items, 2, tag=f"r{r}"), shard=shard)
    time.sleep(float(pause))
"""


def _writer(home, experiment, iteration, shard, n_items, rounds, pause=0.0):
    args = [str(home), experiment, str(iteration), shard, str(n_items), str(rounds), str(pause)]
    return subprocess.Popen([sys.executable, "-c", WRITER, *args], cwd=REPO)


def test_concurrent_writers_to_different_partitions(tmp_path):
    home = tmp_path / "h"
    jobs = [("a", 0, "0", 3), ("a", 1, "0", 4), ("b", 0, "0", 5), ("a", 0, "1", 6), ("a", 0, "2", 7)]
    children = [_writer(home, e, i, s, n, rounds=3) for e, i, s, n in jobs]
    assert [c.wait(timeout=120) for c in children] == [0] * len(jobs)
    # after three rounds each writer's last commit holds 1x its items (rounds 0 and 2) of 2 samples
    counts = dict(
        ((e, i), n)
        for e, i, n in connect(home)
        .execute("SELECT experiment, iteration, count(*) FROM rollouts GROUP BY ALL")
        .fetchall()
    )
    assert counts == {("a", 0): 2 * (3 + 6 + 7), ("a", 1): 2 * 4, ("b", 0): 2 * 5}
    assert check_lake(home, grace_s=0) == []


def test_reader_never_sees_half_a_commit(tmp_path):
    home = tmp_path / "h"
    write_partition(home, "rollouts", "e", 0, rollout_rows(10, 2, tag="start"))
    child = _writer(home, "e", 0, "0", 10, rounds=12, pause=0.05)
    seen = set()
    try:
        while child.poll() is None:
            n, tags = (
                connect(home)
                .execute("SELECT count(*), count(DISTINCT split_part(completion, ':', 1)) FROM rollouts")
                .fetchone()
            )
            seen.add(n)
            assert tags == 1, "rows of two commits visible at once"
    finally:
        child.wait(timeout=120)
    assert child.returncode == 0
    assert seen <= {20, 40}
    assert connect(home).execute("SELECT count(*) FROM rollouts").fetchone()[0] == 40
