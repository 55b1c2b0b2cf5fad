"""The lake on a real S3-compatible object store: a moto server process on loopback, an `s3://` home.

pyarrow writes and reads through its own S3 client, DuckDB through s3fs registered on its connection;
commit, query, check (a scribbled object, a vanished partition) and repair all go over HTTP.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time

import pytest

from aitp.lake import commits, connect, write_partition
from aitp.lake.check import check_report
from aitp.lake.heal import Shard, missing_shards
from tests.lake.helpers import cli, rollout_rows

pytest.importorskip("moto.server", reason="pip install 'moto[server]' (the dev extra)")
pytest.importorskip("s3fs", reason="pip install s3fs (the dev extra)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def s3_home(monkeypatch: pytest.MonkeyPatch):
    """An empty bucket on a fresh moto server; the home URI inside it."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the moto server did not start") from None
                time.sleep(0.1)
        for key, value in {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        }.items():
            monkeypatch.setenv(key, value)
        import boto3
        import fsspec

        fsspec.filesystem("s3").clear_instance_cache()  # a cached s3fs would still point at an older server
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="traces")
        yield "s3://traces/aitp", s3
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.slow  # ~70 s on the loaded 2-core machine: every commit is several HTTP round trips
def test_commit_query_check_and_repair_on_an_object_store(s3_home):
    home, s3 = s3_home
    for k in (0, 1):
        write_partition(home, "iterations", "e", k, [{"status": "done"}], shard="0")
        for shard in ("chunk-0000", "chunk-0001"):
            write_partition(home, "rollouts", "e", k, rollout_rows(50, 4, tag=f"{k}{shard}"), shard=shard)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="traces")["Contents"]]
    assert any(k.startswith("aitp/lake/rollouts/experiment=e/iteration=1/chunk-0001.") for k in keys)

    con = connect(home, read_only=True)
    assert con.execute("SELECT count(*), sum(n_pass) FROM pass_rate").fetchone() == (4, 4 * 50)
    query = cli("sql", "--home", home, "--format", "csv", "SELECT count(*) AS n FROM rollouts")
    assert query.exit_code == 0 and query.stdout == "n\n800\n"
    assert check_report(home).verified == 6

    (bad,) = [c for c in commits(home, "rollouts", "e", 0) if c.shard == "chunk-0001"][0].files
    key = bad.split("/", 1)[1]
    body = bytearray(s3.get_object(Bucket="traces", Key=key)["Body"].read())
    body[len(body) // 4 : len(body) // 4 + 500] = random.Random(0).randbytes(500)
    s3.put_object(Bucket="traces", Key=key, Body=bytes(body))  # bit rot inside one object
    for k in keys:
        if k.startswith("aitp/lake/rollouts/experiment=e/iteration=1/"):
            s3.delete_object(Bucket="traces", Key=k)  # a partition deleted by hand

    found = cli("lake", "check", "--home", home)
    assert found.exit_code == 1
    lines = {tuple(line.split("\t")[:2]) for line in found.stdout.splitlines()}
    gone = "s3://traces/aitp/lake/rollouts/experiment=e/iteration=1"
    assert lines == {("corrupt", f"s3://{bad}"), ("missing-partition", gone)}

    repaired = cli("lake", "check", "--repair", "--home", home)
    assert repaired.exit_code == 0, repaired.stdout
    assert cli("lake", "check", "--home", home).exit_code == 0
    quarantined = [o["Key"] for o in s3.list_objects_v2(Bucket="traces", Prefix="aitp/lake/_quarantine/")["Contents"]]
    assert any(k.endswith(bad.rsplit("/", 1)[1]) for k in quarantined)
    assert missing_shards(home, "e") == [
        Shard("rollouts", "e", 0, "chunk-0001"),
        Shard("rollouts", "e", 1, "chunk-0000"),
        Shard("rollouts", "e", 1, "chunk-0001"),
    ]
    assert connect(home).execute("SELECT count(*) FROM rollouts").fetchone() == (200,)
    assert os.environ["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")
