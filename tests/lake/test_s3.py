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
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from aitp.lake import commits, connect, write_partition
from aitp.lake.check import check_report
from aitp.lake.heal import Shard, missing_shards
from tests.cli.test_bad_input import invoke
from tests.lake.helpers import cli, rollout_rows

pytest.importorskip("moto.server", reason="pip install 'moto[server]' (the dev extra)")
pytest.importorskip("s3fs", reason="pip install s3fs (the dev extra)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def moto_server(**env: str) -> Iterator[str]:
    """A moto server process on a free loopback port (its own settings in `env`); yields its endpoint URL."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **env},
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
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture
def s3_home(monkeypatch: pytest.MonkeyPatch):
    """An empty bucket on a fresh moto server; the home URI inside it."""
    with moto_server() as endpoint:
        for key, value in {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint,
        }.items():
            monkeypatch.setenv(key, value)
        import boto3
        import fsspec

        fsspec.filesystem("s3").clear_instance_cache()  # a cached s3fs would still point at an older server
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="traces")
        yield "s3://traces/aitp", s3


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
    gaps = cli("lake", "check", "--home", home)  # whole again only once a resumed run regenerates them
    assert gaps.exit_code == 1 and "the lake is not whole: 3 shard(s) to regenerate" in gaps.stderr
    assert [line.split("\t")[0] for line in gaps.stdout.splitlines() if "\t" in line] == ["gap"] * 3
    quarantined = [o["Key"] for o in s3.list_objects_v2(Bucket="traces", Prefix="aitp/lake/_quarantine/")["Contents"]]
    assert any(k.endswith(bad.rsplit("/", 1)[1]) for k in quarantined)
    assert missing_shards(home, "e") == [
        Shard("rollouts", "e", 0, "chunk-0001"),
        Shard("rollouts", "e", 1, "chunk-0000"),
        Shard("rollouts", "e", 1, "chunk-0001"),
    ]
    assert connect(home).execute("SELECT count(*) FROM rollouts").fetchone() == (200,)
    assert os.environ["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")


# -- an object-store home that cannot be read: one line each, never "lake ok" ---------------------------

ALLOW_ALL = '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}'


@pytest.fixture(scope="module")
def guarded_store() -> Iterator[dict[str, str]]:
    """A moto server that checks credentials (after the 3 set-up calls that make a user), with bucket `traces`."""
    import boto3

    with moto_server(INITIAL_NO_AUTH_ACTION_COUNT="3") as endpoint:
        iam = boto3.client(
            "iam",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="set-up",
            aws_secret_access_key="set-up",
        )
        iam.create_user(UserName="aitp")
        key = iam.create_access_key(UserName="aitp")["AccessKey"]
        iam.put_user_policy(UserName="aitp", PolicyName="all", PolicyDocument=ALLOW_ALL)
        account = {
            "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint,
        }
        s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id=key["AccessKeyId"],
            aws_secret_access_key=key["SecretAccessKey"],
        )
        s3.create_bucket(Bucket="traces")
        yield account


def _no_aws_config(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """No credentials anywhere the AWS chain looks: environment, files, instance metadata."""
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def _one_line_error(*args: str) -> str:
    code, _, err = invoke(list(args))
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0 and len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, (code, err)
    return lines[0]


@pytest.mark.parametrize("command", [("lake", "check"), ("sql", "SELECT 1"), ("lake", "ls")])
def test_a_missing_bucket_is_an_error_not_lake_ok(guarded_store, monkeypatch, tmp_path, command):
    _no_aws_config(monkeypatch, tmp_path)
    for key, value in guarded_store.items():
        monkeypatch.setenv(key, value)
    assert invoke(["lake", "check", "--home", "s3://traces/aitp"])[0] == 0  # the same store with its bucket: ok
    line = _one_line_error(*command, "--home", "s3://no-such-bucket/aitp")
    assert "bucket 'no-such-bucket'" in line and "does not exist" in line and guarded_store["AWS_ENDPOINT_URL"] in line


def test_credentials_the_store_refuses_are_one_line(guarded_store, monkeypatch, tmp_path):
    _no_aws_config(monkeypatch, tmp_path)
    for key, value in guarded_store.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    line = _one_line_error("lake", "check", "--home", "s3://traces/aitp")
    assert "refused the credentials" in line and "AWS_SECRET_ACCESS_KEY" in line


def test_missing_credentials_are_one_line(monkeypatch, tmp_path):
    """No server needed: the credential chain finds nothing before any request is sent."""
    _no_aws_config(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_free_port()}")
    line = _one_line_error("lake", "check", "--home", "s3://traces/aitp")
    assert "no credentials found for s3://traces/aitp" in line and "AWS_ACCESS_KEY_ID" in line


def test_an_unreachable_endpoint_is_one_line(monkeypatch, tmp_path):
    _no_aws_config(monkeypatch, tmp_path)
    endpoint = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    start = time.monotonic()
    line = _one_line_error("sql", "SELECT 1", "--home", "s3://traces/aitp")
    assert f"cannot reach {endpoint}" in line and "AWS_ENDPOINT_URL" in line
    assert time.monotonic() - start < 5  # asked once, not retried with backoff
