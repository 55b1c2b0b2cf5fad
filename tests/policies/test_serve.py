"""`aitp serve` as a real subprocess, answered through the real `openai` client library."""

from __future__ import annotations

import subprocess
import time

import openai
import pytest
import torch

from aitp.errors import AitpError
from aitp.policies.base import Completion, SamplingParams
from aitp.policies.loading import load_policy
from aitp.policies.tiny.sampler import PromptTooLongError
from tests.rollouts.helpers import PYTHON, make_tiny_checkpoint, start_server, stop, subprocess_env

MESSAGES = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is 2 + 3?"}]
MAX_REQUEST_TOKENS = 8192


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny")


@pytest.fixture(scope="module")
def server(checkpoint, tmp_path_factory):
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    proc, url = start_server(str(checkpoint), log, args=("--max-request-tokens", str(MAX_REQUEST_TOKENS)))
    try:
        yield url
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server, api_key="unused", max_retries=0, timeout=60)


def test_models_lists_the_served_policy(client, checkpoint):
    [model] = client.models.list().data
    assert model.id == checkpoint.name and model.owned_by == "aitp"


def test_chat_completion_with_n_seed_logprobs_usage(client, checkpoint):
    response = client.chat.completions.create(
        model=checkpoint.name, messages=MESSAGES, n=3, seed=11, temperature=1.0, top_p=0.9, max_tokens=12, logprobs=True
    )
    assert response.object == "chat.completion" and [c.index for c in response.choices] == [0, 1, 2]
    total = 0
    for choice in response.choices:
        assert choice.message.role == "assistant"
        tokens = choice.logprobs.content
        assert 0 < len(tokens) <= 12 and all(t.logprob <= 0 for t in tokens)
        assert len(choice.model_extra["token_ids"]) == len(tokens)
        assert choice.finish_reason in ("stop", "length")
        if choice.finish_reason == "length":
            assert len(tokens) == 12
        total += len(tokens)
    assert response.usage.completion_tokens == total
    assert response.usage.prompt_tokens > 0
    assert response.usage.total_tokens == response.usage.prompt_tokens + total
    assert len({c.message.content for c in response.choices}) > 1  # n samples, not one repeated


def test_seed_makes_answers_reproducible(client, checkpoint):
    def ask(seed):
        r = client.chat.completions.create(model=checkpoint.name, messages=MESSAGES, n=2, seed=seed, max_tokens=10)
        return [c.message.content for c in r.choices]

    assert ask(5) == ask(5)
    assert ask(5) != ask(6)


def test_server_answers_what_the_policy_samples_in_process(client, checkpoint):
    """Same weights, same seed: the server's tokens are the in-process policy's (one thread on both sides)."""
    policy = load_policy(str(checkpoint), device="cpu")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        [local] = policy.sample([MESSAGES], SamplingParams(n=2, max_tokens=16), seeds=[21])
    finally:
        torch.set_num_threads(threads)
    r = client.chat.completions.create(model=checkpoint.name, messages=MESSAGES, n=2, seed=21, max_tokens=16)
    assert [c.model_extra["token_ids"] for c in r.choices] == [c.token_ids for c in local]
    assert [c.message.content for c in r.choices] == [c.text for c in local]


def test_completions_endpoint_with_prompt_list(client, checkpoint):
    response = client.completions.create(
        model=checkpoint.name, prompt=["The answer is", "2 + 2 ="], n=2, seed=3, max_tokens=8, logprobs=1
    )
    assert response.object == "text_completion"
    assert [c.index for c in response.choices] == [0, 1, 2, 3]
    for choice in response.choices:
        lp = choice.logprobs
        assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.text_offset) == len(choice.model_extra["token_ids"])
        assert 0 < len(lp.tokens) <= 8
    assert response.usage.completion_tokens == sum(len(c.logprobs.tokens) for c in response.choices)


def test_stop_strings_end_the_text(client, checkpoint):
    stops = [chr(c) for c in range(97, 123)]  # any lowercase letter
    r = client.chat.completions.create(model=checkpoint.name, messages=MESSAGES, n=4, seed=2, max_tokens=64, stop=stops)
    for choice in r.choices:
        assert not any(s in choice.message.content for s in stops)


def test_bad_requests_get_openai_errors(client, checkpoint):
    with pytest.raises(openai.NotFoundError, match=checkpoint.name):
        client.chat.completions.create(model="other-model", messages=MESSAGES)
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.chat.completions.create(model=checkpoint.name, messages=MESSAGES, temperature=5)
    with pytest.raises(openai.BadRequestError, match="stream"):
        client.chat.completions.create(model=checkpoint.name, messages=MESSAGES, stream=True)
    with pytest.raises(openai.BadRequestError, match="role"):
        client.chat.completions.create(model=checkpoint.name, messages=[{"role": "robot", "content": "x"}])


def _refused(call, needle: str) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError, match=needle) as err:
        call()
    return err.value


def test_prompt_beyond_the_context_is_refused(client, checkpoint):
    long = [{"role": "user", "content": "x" * 5000}]  # the tiny model's context is 1,024 tokens
    err = _refused(lambda: client.chat.completions.create(model=checkpoint.name, messages=long), "context")
    assert err.code == "context_length_exceeded"
    _refused(lambda: client.completions.create(model=checkpoint.name, prompt="y" * 5000), "context")


def test_seed_outside_64_bits_is_refused(client, checkpoint):
    ask = lambda seed: client.chat.completions.create(  # noqa: E731
        model=checkpoint.name, messages=MESSAGES, seed=seed, max_tokens=2
    )
    for seed in (2**80, 2**63, -(2**63) - 1):
        _refused(lambda s=seed: ask(s), "seed")
    for seed in (2**63 - 1, -(2**63), -1):  # the whole documented range samples
        assert ask(seed).choices[0].finish_reason in ("stop", "length")


def test_logprobs_outside_their_range_are_refused(client, checkpoint):
    chat = lambda **kw: client.chat.completions.create(model=checkpoint.name, messages=MESSAGES, max_tokens=2, **kw)  # noqa: E731
    text = lambda **kw: client.completions.create(model=checkpoint.name, prompt="2 + 2 =", max_tokens=2, **kw)  # noqa: E731
    _refused(lambda: chat(logprobs=True, top_logprobs=-1), "top_logprobs")
    _refused(lambda: chat(logprobs=True, top_logprobs=21), "top_logprobs")
    _refused(lambda: text(logprobs=-5), "logprobs")
    _refused(lambda: text(logprobs=6), "logprobs")
    assert chat(logprobs=True, top_logprobs=0).choices[0].logprobs is not None


def test_stop_lists_are_bounded(client, checkpoint):
    chat = lambda stop: client.chat.completions.create(  # noqa: E731
        model=checkpoint.name, messages=MESSAGES, max_tokens=64, stop=stop
    )
    start = time.perf_counter()
    _refused(lambda: chat([f"s{i}" for i in range(10_000)]), "at most 64")
    assert time.perf_counter() - start < 5  # refused before the model lock, not after seconds of decoding
    _refused(lambda: chat(["a" * 257]), "stop string")
    _refused(lambda: chat(["ok", ""]), "stop string")
    assert chat([f"s{i}" for i in range(64)]).choices


def test_requests_above_the_token_cap_are_refused(client, checkpoint):
    err = _refused(
        lambda: client.chat.completions.create(model=checkpoint.name, messages=MESSAGES, n=9, max_tokens=1000),
        f"limit of {MAX_REQUEST_TOKENS}",
    )
    assert "9000" in err.message
    _refused(lambda: client.completions.create(model=checkpoint.name, prompt=["a"] * 5, n=2, max_tokens=1000), "10000")
    _refused(lambda: client.completions.create(model=checkpoint.name, prompt=[], max_tokens=2), "empty")
    assert client.chat.completions.create(model=checkpoint.name, messages=MESSAGES, n=8, max_tokens=4).choices


def test_busy_port_and_missing_policy_are_one_line_errors(server, tmp_path):
    port = server.rsplit(":", 1)[1].split("/")[0]
    for args, needle in (
        (["--policy", "tiny", "--port", port], "pick another --port"),
        (["--policy", str(tmp_path / "nope")], "does not exist"),
    ):
        result = subprocess.run(
            [PYTHON, "-m", "aitp", "serve", *args], env=subprocess_env(), capture_output=True, text=True, timeout=60
        )
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 2 and len(lines) == 1 and needle in lines[0], result.stderr


class _HFLikeTokenizer:
    """Word-level ids, called and decoded the way a Hugging Face tokenizer is."""

    vocab = ["<s>", "hello", "world", "!"]

    def __call__(self, text: str) -> dict:
        return {"input_ids": [0] + [self.vocab.index(w) for w in text.split()]}

    def decode(self, ids: list[int]) -> str:
        return " ".join(self.vocab[i] for i in ids)


class _HFLikePolicy:
    name, version = "hf-like", "v0"
    tokenizer = _HFLikeTokenizer()

    def __init__(self) -> None:
        self.seen_ids: list[list[int]] = []

    def sample(self, prompts, params, seeds=None):
        raise AssertionError("raw completions prompts must go through sample_ids")

    def sample_ids(self, prompt_ids, params, seeds=None):
        self.seen_ids += prompt_ids
        ids = [2, 3][: params.max_tokens]
        return [[Completion(self.tokenizer.decode(ids), ids, [-0.5] * len(ids), "length", len(p), len(ids))]
                for p in prompt_ids]  # fmt: skip


def _in_process(policy, **kwargs):
    from fastapi.testclient import TestClient

    from aitp.serve import create_app

    return TestClient(create_app(policy, **kwargs))


def test_completions_tokenise_raw_text_with_the_policys_tokenizer():
    policy = _HFLikePolicy()
    http = _in_process(policy)
    body = http.post("/v1/completions", json={"prompt": "hello world", "max_tokens": 2, "logprobs": 0}).json()
    assert policy.seen_ids == [[0, 1, 2]]
    [choice] = body["choices"]
    assert choice["text"] == "world !" and choice["token_ids"] == [2, 3] and choice["finish_reason"] == "length"
    assert choice["logprobs"]["tokens"] == ["world", "!"] and choice["logprobs"]["text_offset"] == [0, 5]
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert http.get("/v1/models").json()["data"][0]["id"] == "hf-like"


class _ChatOnlyPolicy:
    """Takes chats only and has no tokenizer; refuses the prompts "long" and "odd" as a policy may."""

    name, version = "chat-only", None

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def sample(self, prompts, params, seeds=None):
        self.calls.append((prompts, params, seeds))
        if prompts[0][-1]["content"] == "long":
            raise PromptTooLongError("the prompt has\n   5000 tokens: shorten it")
        if prompts[0][-1]["content"] == "odd":
            raise AitpError("cannot   sample\nthis")
        return [[Completion("ok", [5, 6], [-0.25, -0.5], "stop", 3, 2)] * params.n for _ in prompts]


def test_chat_choices_without_a_tokenizer_name_tokens_by_id():
    policy = _ChatOnlyPolicy()
    parts = [{"type": "text", "text": "2 +"}, {"type": "text", "text": " 3?"}]
    request = {"model": "served", "messages": [{"role": "user", "content": parts}], "n": 2, "seed": 7}
    request |= {"max_tokens": 9, "max_completion_tokens": 4, "logprobs": True}
    body = _in_process(policy, model_name="served").post("/v1/chat/completions", json=request).json()
    [(prompts, params, seeds)] = policy.calls
    assert prompts == [[{"role": "user", "content": "2 + 3?"}]] and seeds == [7]
    assert params == SamplingParams(n=2, temperature=1.0, top_p=1.0, max_tokens=4, stop=())
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-") and body["model"] == "served"
    assert [c["index"] for c in body["choices"]] == [0, 1]
    entry = {"token": "token_id:5", "bytes": list(b"token_id:5"), "logprob": -0.25, "top_logprobs": []}
    assert body["choices"][0]["logprobs"] == {
        "content": [entry, {**entry, "token": "token_id:6", "bytes": list(b"token_id:6"), "logprob": -0.5}],
        "refusal": None,
    }
    assert body["choices"][1]["message"] == {"role": "assistant", "content": "ok"}
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}


def test_raw_prompts_reach_a_chat_only_policy_as_user_turns():
    policy = _ChatOnlyPolicy()
    request = {"prompt": ["x", "y"], "n": 2, "seed": 1, "stop": "!", "temperature": 0.5, "top_p": 0.5}
    body = _in_process(policy).post("/v1/completions", json=request).json()
    [(prompts, params, seeds)] = policy.calls
    assert prompts == [[{"role": "user", "content": "x"}], [{"role": "user", "content": "y"}]] and seeds == [1, 1]
    assert params == SamplingParams(n=2, temperature=0.5, top_p=0.5, max_tokens=256, stop=("!",))
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-") and body["model"] == "chat-only"
    assert [(c["index"], c["text"], c["logprobs"]) for c in body["choices"]] == [(i, "ok", None) for i in range(4)]
    assert body["usage"] == {"prompt_tokens": 6, "completion_tokens": 8, "total_tokens": 14}


def test_refusals_are_openai_errors_that_name_the_field():
    http = _in_process(_ChatOnlyPolicy(), model_name="served")
    chat = lambda content="hi", **kw: http.post(  # noqa: E731
        "/v1/chat/completions", json={"messages": [{"role": "user", "content": content}], **kw}
    )
    error = lambda response: (response.status_code, response.json()["error"])  # noqa: E731
    status, body = error(chat(model="other"))
    assert status == 404 and body == {
        "message": "model 'other' is not served here: use 'served'",
        "type": "invalid_request_error",
        "param": "model",
        "code": None,
    }
    assert chat(model="").status_code == 200 and chat(model="served").status_code == 200
    assert error(chat(stream=True))[1]["param"] == "stream"
    status, invalid = error(chat(temperature=5))  # FastAPI's 422, answered as a 400 naming the field
    assert status == 400 and invalid["param"] == "temperature" and invalid["message"].startswith("temperature: ")
    too_long = {"message": "the prompt has 5000 tokens: shorten it", "param": None, "code": "context_length_exceeded"}
    assert error(chat("long")) == (400, {**body, **too_long})
    assert error(chat("odd")) == (400, {**body, "message": "cannot sample this", "param": None})
    echo = http.post("/v1/completions", json={"prompt": "x", "echo": True})
    assert error(echo) == (400, {**body, "message": "echo is not supported: send echo=false", "param": "echo"})
    assert http.get("/health").json() == {"status": "ok"}
    [card] = http.get("/v1/models").json()["data"]
    assert card == {"id": "served", "object": "model", "created": card["created"], "owned_by": "aitp", "version": None}
