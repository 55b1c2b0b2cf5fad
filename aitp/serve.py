"""`aitp serve`: a small OpenAI-compatible HTTP server over a local policy (tiny or hf).

Endpoints: `/v1/models`, `/v1/chat/completions`, `/v1/completions` (and `/health`), with `n`,
`temperature`, `top_p`, `max_tokens`, `stop`, `seed`, `logprobs`, usage and finish_reason. Each
choice also carries `token_ids`, as vLLM does with `return_token_ids`. Requests are served one at a
time (a lock around the model): the model is not thread-safe, and batching requests together would
make a seeded answer depend on what else arrived at the same moment. No streaming, no tools.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from aitp.errors import AitpError
from aitp.policies.base import Completion, Messages, Policy, SamplingParams
from aitp.policies.tiny.sampler import PromptTooLongError
from aitp.serve_limits import DEFAULT_MAX_BODY_BYTES, DEFAULT_REQUEST_TIMEOUT_S, BodyLimit, bounded_protocol
from aitp.tokenizer import ByteTokenizer

DEFAULT_MAX_TOKENS = 256
# Limits that keep one request from holding the model lock for long: a request asks for at most
# `max_request_tokens` tokens in all (prompts x n x max_tokens), and stop strings are checked at
# every token, so their number and length are bounded too.
DEFAULT_MAX_REQUEST_TOKENS = 65536
MAX_STOP_STRINGS = 64
MAX_STOP_CHARS = 256
SEED_RANGE = (-(2**63), 2**63 - 1)  # a signed 64-bit integer, as the OpenAI API documents


class ServeError(AitpError):
    """The server cannot start: a port in use, a bad host."""


class _ApiError(Exception):
    """A request this server refuses: the status and the message name what to send instead."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="allow")  # unknown OpenAI/vLLM fields are accepted and ignored

    model: str | None = None
    n: int | None = Field(None, ge=1, le=256)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=SEED_RANGE[0], le=SEED_RANGE[1])
    stream: bool | None = False


class ChatRequest(_Sampling):
    messages: list[dict[str, Any]]
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = False
    top_logprobs: int | None = Field(None, ge=0, le=20)


class CompletionRequest(_Sampling):
    prompt: str | list[str]
    logprobs: int | None = Field(None, ge=0, le=5)
    echo: bool | None = False


def _params(req: _Sampling, max_tokens: int | None, prompts: int, max_request_tokens: int) -> SamplingParams:
    """The request's sampling parameters, refused (400) when they would hold the model too long."""
    stop = req.stop if isinstance(req.stop, list) else ([req.stop] if req.stop else [])
    if len(stop) > MAX_STOP_STRINGS:
        raise _ApiError(400, f"stop has {len(stop)} strings: send at most {MAX_STOP_STRINGS}", "stop")
    if any(not s or len(s) > MAX_STOP_CHARS for s in stop):
        raise _ApiError(400, f"each stop string must have 1 to {MAX_STOP_CHARS} characters", "stop")
    asked = prompts * (req.n or 1) * (max_tokens or DEFAULT_MAX_TOKENS)
    if asked > max_request_tokens:
        raise _ApiError(
            400,
            f"the request asks for up to {asked} tokens (prompts x n x max_tokens), above this server's "
            f"limit of {max_request_tokens}: lower n or max_tokens, or split the request",
            "max_tokens",
        )
    return SamplingParams(
        n=req.n or 1,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        max_tokens=max_tokens or DEFAULT_MAX_TOKENS,
        stop=tuple(stop),
    )


def _content(content: Any, i: int) -> str:
    """A message's text: a string, or text parts joined; any other type or part is refused (400)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _ApiError(400, f"messages[{i}].content must be a string or a list of text parts", "messages")
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise _ApiError(
                400, f'messages[{i}].content[{j}] must be a text part {{"type": "text", "text": "..."}}', "messages"
            )
        texts.append(part["text"])
    return "".join(texts)


def _messages(raw: list[dict[str, Any]]) -> Messages:
    """Chat messages with text content; content given as a list of text parts is joined."""
    out = []
    for i, m in enumerate(raw):
        role = m.get("role")
        if not isinstance(role, str) or role not in ("system", "user", "assistant"):
            raise _ApiError(400, f"messages[{i}].role must be system, user or assistant", "messages")
        out.append({"role": role, "content": _content(m.get("content"), i)})
    if not out:
        raise _ApiError(400, "messages must not be empty", "messages")
    return out


def _text_ids(policy: Any, text: str) -> list[int] | None:
    """A raw completions prompt as token ids, when the policy samples from ids; else None."""
    tokenizer = getattr(policy, "tokenizer", None)
    if tokenizer is None or not hasattr(policy, "sample_ids"):
        return None
    if isinstance(tokenizer, ByteTokenizer):
        return tokenizer.encode(text, bos=True)
    return list(tokenizer(text)["input_ids"])  # a Hugging Face tokenizer: its own special tokens


def _token_entries(policy: Any, ids: list[int], count: int) -> list[tuple[str, list[int]]]:
    """(text, bytes) per generated token: from the policy's tokenizer, else vLLM's `token_id:N`."""
    tokenizer = getattr(policy, "tokenizer", None)
    if len(ids) != count:
        return [("", [])] * count
    if isinstance(tokenizer, ByteTokenizer):
        return [(tokenizer.decode([i]), [i] if i < 256 else []) for i in ids]
    if tokenizer is not None and hasattr(tokenizer, "decode"):
        try:
            texts = [tokenizer.decode([i]) for i in ids]
            return [(t, list(t.encode("utf-8"))) for t in texts]
        except Exception:  # a tokenizer that cannot decode single ids falls back to ids
            pass
    return [(f"token_id:{i}", list(f"token_id:{i}".encode())) for i in ids]


def _usage(groups: list[list[Completion]]) -> dict[str, int]:
    """Token counts as OpenAI reports them: a group's prompt is counted once, however many samples it has."""
    prompt = sum(g[0].prompt_tokens for g in groups if g)
    completion = sum(c.completion_tokens for g in groups for c in g)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _chat_logprobs(policy: Any, completion: Completion) -> dict[str, Any]:
    """A chat choice's `logprobs`: one entry per generated token, with no alternatives (top_logprobs)."""
    tokens = _token_entries(policy, completion.token_ids, len(completion.logprobs))
    content = [
        {"token": t, "bytes": b, "logprob": lp, "top_logprobs": []} for (t, b), lp in zip(tokens, completion.logprobs)
    ]
    return {"content": content, "refusal": None}


def _chat_choice(policy: Any, index: int, completion: Completion, logprobs: bool) -> dict[str, Any]:
    """One sample as a chat completions choice, with its token ids as vLLM returns them."""
    return {
        "index": index,
        "message": {"role": "assistant", "content": completion.text},
        "logprobs": _chat_logprobs(policy, completion) if logprobs else None,
        "finish_reason": completion.finish_reason,
        "token_ids": completion.token_ids,
    }


def _text_logprobs(policy: Any, completion: Completion) -> dict[str, Any]:
    """A completions choice's `logprobs` in the legacy layout: parallel lists, offsets into the text."""
    tokens = [t for t, _ in _token_entries(policy, completion.token_ids, len(completion.logprobs))]
    offsets, at = [], 0
    for t in tokens:
        offsets.append(at)
        at += len(t)
    return {
        "tokens": tokens,
        "token_logprobs": completion.logprobs,
        "top_logprobs": [{} for _ in tokens],
        "text_offset": offsets,
    }


def _text_choice(policy: Any, index: int, completion: Completion, logprobs: bool) -> dict[str, Any]:
    """One sample as a completions choice, with its token ids as vLLM returns them."""
    return {
        "index": index,
        "text": completion.text,
        "logprobs": _text_logprobs(policy, completion) if logprobs else None,
        "finish_reason": completion.finish_reason,
        "token_ids": completion.token_ids,
    }


def _response(id_prefix: str, kind: str, model: str, choices: list[dict], groups: list[list[Completion]]) -> dict:
    """The envelope every completion answer shares: a fresh id, the time, the model, the usage."""
    return {
        "id": f"{id_prefix}-{uuid.uuid4().hex}",
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": _usage(groups),
    }


def _text_prompts(req: CompletionRequest) -> list[str]:
    """The completions request's prompts as a list, refused (400) when echo is asked or none is given."""
    if req.echo:
        raise _ApiError(400, "echo is not supported: send echo=false", "echo")
    texts = [req.prompt] if isinstance(req.prompt, str) else req.prompt
    if not texts:
        raise _ApiError(400, "prompt must not be an empty list", "prompt")
    return texts


class _ServedPolicy:
    """One policy under the name clients ask for, sampled by one request at a time (it is not thread-safe)."""

    def __init__(self, policy: Policy, name: str, max_request_tokens: int) -> None:
        self.policy, self.name, self.max_request_tokens = policy, name, max_request_tokens
        self.created = int(time.time())
        self._lock = threading.Lock()

    def check(self, req: _Sampling) -> None:
        """Refuse a request for another model (404), or for streaming, which this server does not do (400)."""
        if req.model not in (None, "", self.name):
            raise _ApiError(404, f"model '{req.model}' is not served here: use '{self.name}'", "model")
        if req.stream:
            raise _ApiError(400, "streaming is not supported: send stream=false", "stream")

    def params(self, req: _Sampling, max_tokens: int | None, prompts: int) -> SamplingParams:
        """The request's sampling parameters, within this server's token cap."""
        return _params(req, max_tokens, prompts, self.max_request_tokens)

    def sample(self, prompts: list[Messages], params: SamplingParams, seed: int | None) -> list[list[Completion]]:
        """Samples for chats; one seed seeds every prompt, so an answer does not depend on its neighbours."""
        seeds = None if seed is None else [seed] * len(prompts)
        with self._lock:
            return self.policy.sample(prompts, params, seeds)

    def sample_text(self, texts: list[str], params: SamplingParams, seed: int | None) -> list[list[Completion]]:
        """Raw prompts go to the model as text; a policy that only takes chats gets them as a user turn."""
        ids = [_text_ids(self.policy, t) for t in texts]
        if any(i is None for i in ids):
            return self.sample([[{"role": "user", "content": t}] for t in texts], params, seed)
        seeds = None if seed is None else [seed] * len(texts)
        with self._lock:
            return self.policy.sample_ids(ids, params, seeds)


def _error(status: int, message: str, param: str | None, code: str | None = None) -> JSONResponse:
    """An error in OpenAI's shape, so that client libraries raise their usual exception with our message."""
    body = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return JSONResponse({"error": body}, status_code=status)


async def _api_error(_: Request, exc: _ApiError) -> JSONResponse:
    """A request this server refuses, with the status it chose."""
    return _error(exc.status, exc.message, exc.param)


async def _policy_refusal(_: Request, exc: AitpError) -> JSONResponse:
    """The policy refuses what the request asked for (a prompt beyond the model's context...): a 400 in one line."""
    code = "context_length_exceeded" if isinstance(exc, PromptTooLongError) else None
    return _error(400, " ".join(str(exc).split()), None, code)


async def _invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
    """A body that does not fit the request model: a 400 naming the first field at fault, not FastAPI's 422."""
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
    return _error(400, f"{where}: {first.get('msg', 'invalid request')}", where or None)


def _add_info_routes(app: FastAPI, served: _ServedPolicy) -> None:
    """`/health` for probes and `/v1/models`, which lists the one policy served."""

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        card = {
            "id": served.name,
            "object": "model",
            "created": served.created,
            "owned_by": "aitp",
            "version": getattr(served.policy, "version", None),
        }
        return {"object": "list", "data": [card]}


def _add_completion_routes(app: FastAPI, served: _ServedPolicy) -> None:
    """`/v1/chat/completions` (one chat, n samples) and `/v1/completions` (one or more raw prompts, n samples each)."""

    @app.post("/v1/chat/completions")
    def chat(req: ChatRequest) -> dict[str, Any]:
        served.check(req)
        params = served.params(req, req.max_completion_tokens or req.max_tokens, 1)
        [group] = served.sample([_messages(req.messages)], params, req.seed)
        choices = [_chat_choice(served.policy, i, c, bool(req.logprobs)) for i, c in enumerate(group)]
        return _response("chatcmpl", "chat.completion", served.name, choices, [group])

    @app.post("/v1/completions")
    def completions(req: CompletionRequest) -> dict[str, Any]:
        served.check(req)
        texts = _text_prompts(req)
        groups = served.sample_text(texts, served.params(req, req.max_tokens, len(texts)), req.seed)
        logprobs = req.logprobs is not None
        choices = [
            _text_choice(served.policy, g * len(group) + j, c, logprobs)
            for g, group in enumerate(groups)
            for j, c in enumerate(group)
        ]
        return _response("cmpl", "text_completion", served.name, choices, groups)


def _served_name(policy: Policy, model_name: str | None) -> str:
    """The name clients ask for: `model_name`, else the policy's own name."""
    return model_name or getattr(policy, "name", "aitp")


def create_app(
    policy: Policy,
    model_name: str | None = None,
    max_request_tokens: int = DEFAULT_MAX_REQUEST_TOKENS,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> FastAPI:
    """The FastAPI app serving one policy under `model_name` (default: the policy's name); a request
    may ask for at most `max_request_tokens` tokens (prompts x n x max_tokens) in a body of at most
    `max_body_bytes`."""
    app = FastAPI(title="aitp serve", docs_url=None, redoc_url=None)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    served = _ServedPolicy(policy, _served_name(policy, model_name), max_request_tokens)
    app.add_exception_handler(_ApiError, _api_error)
    app.add_exception_handler(AitpError, _policy_refusal)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    _add_info_routes(app, served)
    _add_completion_routes(app, served)
    return app


def bind(host: str = "127.0.0.1", port: int = 8000) -> socket.socket:
    """A listening socket on host:port (port 0 picks a free one), with a one-line error on failure."""
    if not 0 <= port <= 65535:
        raise ServeError(f"port {port} is outside 0-65535: pick another --port (0 picks a free one)")
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(info[0], socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(info[4])
        sock.listen(128)
    except OSError as exc:
        raise ServeError(
            f"cannot listen on {host}:{port} ({exc.strerror or exc}): pick another --port or --host"
        ) from exc
    return sock


def serve(
    policy: Policy,
    host: str = "127.0.0.1",
    port: int = 8000,
    model_name: str | None = None,
    sock: socket.socket | None = None,
    max_request_tokens: int = DEFAULT_MAX_REQUEST_TOKENS,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
) -> None:
    """Serve a policy until interrupted; prints `serving MODEL at http://HOST:PORT/v1` once listening.

    Pass `sock` (from `bind`) to listen on a socket bound before the model was loaded. Each request
    must arrive whole (headers and body) within `request_timeout_s`.
    """
    import uvicorn

    sock = sock or bind(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    served = _served_name(policy, model_name)
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    app = create_app(policy, model_name, max_request_tokens, max_body_bytes)
    print(f"serving {served} at http://{shown}:{bound_port}/v1", file=sys.stderr, flush=True)
    config = uvicorn.Config(app, http=bounded_protocol(request_timeout_s), log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])
