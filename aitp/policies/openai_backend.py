"""A policy served by any OpenAI-compatible server (vLLM, SGLang, `aitp serve`).

One request per prompt asks for `n` completions with the prompt's seed, so a retried shard asks
the server the same questions. Requests run in a thread pool capped by `concurrency`; each one has
a timeout and is retried with exponential backoff on connection errors, timeouts, 429 and 5xx.
Token log-probs are always requested; token ids come from the server's `token_ids` field (vLLM's
`return_token_ids`, always sent by `aitp serve`) or from `token_id:N` token strings, else stay empty.
"""

from __future__ import annotations

import inspect
import os
import random
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from aitp.errors import AitpError
from aitp.policies.base import Completion, Messages, SamplingParams

Endpoint = Literal["chat", "completions"]
_RETRYABLE_STATUS = {408, 409, 425, 429}
_TOKEN_ID = re.compile(r"^token_id:(\d+)$")


class PolicyServerError(AitpError):
    """The OpenAI-compatible server refused, timed out, or rejected a request."""


def render_plain_prompt(messages: Messages) -> str:
    """Messages as plain text for the completions endpoint (models without a chat template)."""
    parts = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n\n".join(parts) + "\n\nAssistant:"


class OpenAIPolicy:
    """Samples from a model behind an OpenAI-compatible HTTP API; see the module docstring."""

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        api_key: str | None = None,
        endpoint: Endpoint = "chat",
        concurrency: int = 8,
        timeout_s: float = 120.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        return_token_ids: bool = True,
        version: str | None = None,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        import openai

        if endpoint not in ("chat", "completions"):
            raise PolicyServerError(f"unknown endpoint '{endpoint}': use chat or completions")
        if concurrency < 1:
            raise PolicyServerError(f"concurrency must be at least 1, got {concurrency}")
        self.base_url = base_url.rstrip("/")
        self.endpoint: Endpoint = endpoint
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self.backoff_s = float(backoff_s)
        self.extra_body = dict(extra_body or {})
        if return_token_ids:
            self.extra_body.setdefault("return_token_ids", True)
        self._model = model
        self._version = version
        self._slots = threading.BoundedSemaphore(concurrency)
        self.concurrency = concurrency
        # The client's own retries are off: ours know which failures are worth retrying and say so.
        self._client = openai.OpenAI(
            base_url=self.base_url,
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
            timeout=self.timeout_s,
            max_retries=0,
        )

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> OpenAIPolicy:
        """Build from a policy spec `{"backend": "openai", "base_url": ..., "model": ..., ...}`."""
        if not spec.get("base_url"):
            raise PolicyServerError('openai policy spec needs "base_url", e.g. http://127.0.0.1:8000/v1')
        options = {k: v for k, v in spec.items() if k != "backend"}
        known = set(inspect.signature(cls.__init__).parameters) - {"self"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise PolicyServerError(
                f"unknown openai policy option(s) {', '.join(unknown)}: use {', '.join(sorted(known))}"
            )
        return cls(**options)

    @property
    def model(self) -> str:
        """The served model id: as configured, else the first one `/v1/models` lists."""
        if self._model is None:
            models = self._call(lambda: self._client.models.list(), "list models")
            ids = [m.id for m in models.data]
            if not ids:
                raise PolicyServerError(f"the server at {self.base_url} serves no model: pass model= explicitly")
            self._model = ids[0]
        return self._model

    # name and version never call the server (isinstance checks on the protocol read them); the
    # model id is resolved by the first request.
    @property
    def name(self) -> str:
        return f"openai:{self._model or self.base_url}"

    @property
    def version(self) -> str:
        return self._version or self._model or self.base_url

    def check(self) -> None:
        """Fail fast, with a one-line fix, if the server does not answer or lacks the model."""
        models = self._call(lambda: self._client.models.list(), "list models")
        ids = [m.id for m in models.data]
        if self._model is not None and ids and self._model not in ids:
            raise PolicyServerError(
                f"the server at {self.base_url} does not serve model '{self._model}': use one of {', '.join(ids)}"
            )

    def sample(
        self, prompts: list[Messages], params: SamplingParams, seeds: list[int] | None = None
    ) -> list[list[Completion]]:
        """Return `params.n` completions per prompt, one request per prompt, `seeds[i]` passed through."""
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError("seeds and prompts differ in length")
        if not prompts:
            return []
        model = self.model
        jobs = [(p, None if seeds is None else int(seeds[i])) for i, p in enumerate(prompts)]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(jobs))) as pool:
            return list(pool.map(lambda job: self._sample_one(model, job[0], params, job[1]), jobs))

    def _sample_one(self, model: str, messages: Messages, params: SamplingParams, seed: int | None) -> list[Completion]:
        common: dict[str, Any] = {
            "model": model,
            "n": params.n,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
            "extra_body": self.extra_body or None,
        }
        if params.stop:
            common["stop"] = list(params.stop)
        if seed is not None:
            common["seed"] = seed
        with self._slots:
            start = time.perf_counter()
            if self.endpoint == "chat":
                response = self._call(
                    lambda: self._client.chat.completions.create(messages=messages, logprobs=True, **common),
                    "chat completion",
                )
            else:
                response = self._call(
                    lambda: self._client.completions.create(prompt=render_plain_prompt(messages), logprobs=1, **common),
                    "completion",
                )
            latency = time.perf_counter() - start
        return _to_completions(response, self.endpoint, params.n, latency)

    def _call(self, request, what: str):
        """Run a request, retrying transient failures with exponential backoff and jitter."""
        import openai

        for attempt in range(self.retries + 1):
            try:
                return request()
            except openai.APIConnectionError as exc:  # includes timeouts
                failure: Exception = exc
            except openai.APIStatusError as exc:
                if exc.status_code not in _RETRYABLE_STATUS and exc.status_code < 500:
                    raise PolicyServerError(
                        f"the server at {self.base_url} rejected the {what} (HTTP {exc.status_code}: "
                        f"{_short(exc.message)}): fix the request settings or the model name"
                    ) from exc
                failure = exc
            if attempt < self.retries:
                time.sleep(self.backoff_s * (2**attempt) * (1 + random.random()))
        raise self._give_up(failure, what) from failure

    def _give_up(self, exc: Exception, what: str) -> PolicyServerError:
        import openai

        tries = f"after {self.retries + 1} tries"
        if isinstance(exc, openai.APITimeoutError):
            return PolicyServerError(
                f"the server at {self.base_url} did not answer a {what} within {self.timeout_s:g}s {tries}: "
                "raise timeout_s, lower concurrency, or check the server's load"
            )
        if isinstance(exc, openai.APIConnectionError):
            return PolicyServerError(
                f"cannot connect to an OpenAI-compatible server at {self.base_url} {tries}: start one "
                "(e.g. `aitp serve --policy PATH`) or fix the base URL"
            )
        status = getattr(exc, "status_code", "?")
        return PolicyServerError(
            f"the server at {self.base_url} kept failing the {what} (HTTP {status}) {tries}: check its logs"
        )


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _token_ids(choice: Any, tokens: list[str]) -> list[int]:
    extra = getattr(choice, "model_extra", None) or {}
    ids = extra.get("token_ids")
    if isinstance(ids, list):
        return [int(i) for i in ids]
    matches = [_TOKEN_ID.match(t) for t in tokens]
    if tokens and all(matches):
        return [int(m.group(1)) for m in matches]
    return []


def _to_completions(response: Any, endpoint: Endpoint, n: int, latency: float) -> list[Completion]:
    """Map a (chat) completion response to our completions, in choice-index order."""
    usage = getattr(response, "usage", None)
    prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
    choices = sorted(response.choices, key=lambda c: c.index)
    out = []
    for choice in choices:
        if endpoint == "chat":
            text = choice.message.content or ""
            content = (choice.logprobs.content if choice.logprobs is not None else None) or []
            logprobs = [float(t.logprob) for t in content]
            tokens = [t.token for t in content]
        else:
            text = choice.text or ""
            lp = choice.logprobs
            logprobs = [float(x) for x in (lp.token_logprobs or []) if x is not None] if lp is not None else []
            tokens = list(lp.tokens or []) if lp is not None else []
        token_ids = _token_ids(choice, tokens)
        if logprobs or token_ids:
            completion_tokens = max(len(logprobs), len(token_ids))
        else:
            completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0) // max(1, len(choices))
        reason = choice.finish_reason
        extra: dict[str, Any] = {"latency_s": latency, "model": getattr(response, "model", None)}
        if reason not in ("stop", "length"):
            extra["server_finish_reason"] = reason
        out.append(
            Completion(
                text=text,
                token_ids=token_ids,
                logprobs=logprobs,
                finish_reason="length" if reason == "length" else "stop",
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                extra=extra,
            )
        )
    if len(out) != n:
        raise PolicyServerError(f"the server returned {len(out)} completions where {n} were asked: check its n limit")
    return out
