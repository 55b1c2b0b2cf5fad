"""The `openai` backend: round trips through a real `aitp serve`, retries, timeouts and concurrency limits."""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from aitp.policies.base import Policy, SamplingParams
from aitp.policies.loading import load_policy
from aitp.policies.openai_backend import OpenAIPolicy, PolicyServerError, render_plain_prompt
from aitp.reasoning.items import generate_items
from aitp.reasoning.rollouts import run_rollouts
from tests.rollouts.helpers import free_port, make_tiny_checkpoint, start_server, stop

CHATS = [
    [{"role": "user", "content": "What is 2 + 3?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Spell 'cat' backwards."}],
    [{"role": "user", "content": "Name a prime."}],
]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny")


@pytest.fixture(scope="module")
def base_url(checkpoint, tmp_path_factory):
    proc, url = start_server(str(checkpoint), tmp_path_factory.mktemp("serve") / "serve.log")
    try:
        yield url
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def local(checkpoint):
    return load_policy(str(checkpoint), device="cpu")


def one_thread(fn):
    """Run `fn` with torch on one thread, as the server runs, so float sums match bit for bit."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return fn()
    finally:
        torch.set_num_threads(threads)


def test_chat_round_trip_equals_the_local_policy(base_url, local, checkpoint):
    policy = load_policy({"backend": "openai", "base_url": base_url}, device=None)
    assert isinstance(policy, OpenAIPolicy) and isinstance(policy, Policy)
    params = SamplingParams(n=2, temperature=0.8, top_p=0.95, max_tokens=20)
    remote = policy.sample(CHATS, params, seeds=[1, 2, 3])
    assert policy.model == checkpoint.name and policy.version == checkpoint.name  # resolved from /v1/models
    there = one_thread(lambda: local.sample(CHATS, params, seeds=[1, 2, 3]))
    assert len(remote) == 3 and all(len(group) == 2 for group in remote)
    for got_group, want_group in zip(remote, there):
        for got, want in zip(got_group, want_group):
            assert got.text == want.text and got.token_ids == want.token_ids
            assert got.finish_reason == want.finish_reason
            assert got.completion_tokens == want.completion_tokens == len(got.logprobs)
            assert got.prompt_tokens == want.prompt_tokens
            assert got.logprobs == pytest.approx(want.logprobs, abs=1e-4)
            assert got.extra["latency_s"] > 0


def test_completions_endpoint_renders_plain_text(base_url, local):
    policy = OpenAIPolicy(base_url, endpoint="completions")
    params = SamplingParams(n=2, max_tokens=12)
    [group] = policy.sample(CHATS[:1], params, seeds=[4])
    ids = local.tokenizer.encode(render_plain_prompt(CHATS[0]), bos=True)
    [want] = one_thread(lambda: local.sample_ids([ids], params, seeds=[4]))
    assert [c.token_ids for c in group] == [c.token_ids for c in want]
    assert [c.text for c in group] == [c.text for c in want]


def test_rollouts_through_the_server_match_local_rollouts(base_url, checkpoint):
    from distributed import Client, LocalCluster

    items = generate_items("basic_arithmetic", 3, seed=9)
    params = SamplingParams(max_tokens=16)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        with Client(cluster, set_as_default=False) as client:
            remote = run_rollouts(
                items, {"backend": "openai", "base_url": base_url}, replace(params, n=2), client, seed=9
            )
            here = one_thread(
                lambda: run_rollouts(items, str(checkpoint), replace(params, n=2), client, seed=9, shard_size=1)
            )
    assert [r["completion"] for r in remote] == [r["completion"] for r in here]
    assert [r["final_score"] for r in remote] == [r["final_score"] for r in here]
    assert remote[0]["model_version"] == checkpoint.name


def test_refused_connection_names_the_fix():
    policy = OpenAIPolicy(f"http://127.0.0.1:{free_port()}/v1", model="m", retries=1, backoff_s=0.01)
    with pytest.raises(PolicyServerError, match="cannot connect.*after 2 tries.*aitp serve"):
        policy.sample(CHATS[:1], SamplingParams())


def test_server_that_never_answers_times_out():
    with socket.socket() as sock:  # listens but never accepts: connects, then silence
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        policy = OpenAIPolicy(url, model="m", timeout_s=0.3, retries=1, backoff_s=0.01)
        start = time.monotonic()
        with pytest.raises(PolicyServerError, match="did not answer.*within 0.3s.*timeout_s"):
            policy.sample(CHATS[:1], SamplingParams())
        assert time.monotonic() - start < 5


def test_unknown_model_is_not_retried(base_url):
    policy = OpenAIPolicy(base_url, model="no-such-model", retries=3, backoff_s=5)
    start = time.monotonic()
    with pytest.raises(PolicyServerError, match="HTTP 404"):
        policy.sample(CHATS[:1], SamplingParams())
    assert time.monotonic() - start < 2
    with pytest.raises(PolicyServerError, match="does not serve model 'no-such-model'"):
        policy.check()


class _FlakyServer(ThreadingHTTPServer):
    """Fails the first `failures` chat requests with 503, then answers; records peak concurrency."""

    def __init__(self, failures: int, delay_s: float) -> None:
        super().__init__(("127.0.0.1", 0), _FlakyHandler)
        self.failures, self.delay_s = failures, delay_s
        self.lock = threading.Lock()
        self.in_flight = self.peak = self.requests = 0
        self.seeds: list[int] = []


class _FlakyHandler(BaseHTTPRequestHandler):
    server: _FlakyServer

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        s = self.server
        with s.lock:
            s.requests += 1
            fail = s.failures > 0
            s.failures -= fail
            s.in_flight += 1
            s.peak = max(s.peak, s.in_flight)
        time.sleep(s.delay_s)
        with s.lock:
            s.in_flight -= 1
            if not fail:
                s.seeds.append(body["seed"])
        if fail:
            self._send(503, {"error": {"message": "warming up"}})
            return
        choices = [
            {"index": i, "message": {"role": "assistant", "content": f"seed {body['seed']}"}, "finish_reason": "length",
             "logprobs": {"content": [{"token": "token_id:7", "bytes": [], "logprob": -0.25, "top_logprobs": []}]}}
            for i in range(body["n"])
        ]  # fmt: skip
        usage = {"prompt_tokens": 5, "completion_tokens": body["n"], "total_tokens": 5 + body["n"]}
        self._send(200, {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                         "choices": choices, "usage": usage})  # fmt: skip

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def flaky():
    servers = []

    def start(failures: int = 0, delay_s: float = 0.0) -> tuple[_FlakyServer, str]:
        server = _FlakyServer(failures, delay_s)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server, f"http://127.0.0.1:{server.server_address[1]}/v1"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_transient_failures_are_retried_with_backoff(flaky):
    server, url = flaky(failures=2)
    policy = OpenAIPolicy(url, model="m", retries=3, backoff_s=0.01)
    [[completion]] = policy.sample(CHATS[:1], SamplingParams(n=1), seeds=[42])
    assert server.requests == 3 and completion.text == "seed 42"
    assert completion.token_ids == [7] and completion.logprobs == [-0.25] and completion.finish_reason == "length"


def test_concurrency_is_capped_and_seeds_pass_through(flaky):
    server, url = flaky(delay_s=0.05)
    policy = OpenAIPolicy(url, model="m", concurrency=2)
    seeds = list(range(100, 108))
    groups = policy.sample([CHATS[0]] * 8, SamplingParams(n=3), seeds=seeds)
    assert server.peak == 2
    assert sorted(server.seeds) == seeds
    assert [g[0].text for g in groups] == [f"seed {s}" for s in seeds]  # answers stay in prompt order
    assert all(len(g) == 3 and g[0].completion_tokens == 1 for g in groups)


def test_spec_options_are_checked():
    with pytest.raises(PolicyServerError, match="base_url"):
        OpenAIPolicy.from_spec({"backend": "openai"})
    with pytest.raises(PolicyServerError, match="unknown openai policy option.*concurency"):
        OpenAIPolicy.from_spec({"backend": "openai", "base_url": "http://h/v1", "concurency": 2})
    policy = OpenAIPolicy.from_spec({"backend": "openai", "base_url": "http://h/v1/", "model": "m", "version": "v3"})
    assert (policy.base_url, policy.name, policy.version) == ("http://h/v1", "openai:m", "v3")
