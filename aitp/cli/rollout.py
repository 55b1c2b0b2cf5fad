"""`aitp rollout` (sample and score groups on Dask, as JSONL) and `aitp serve` (an OpenAI-compatible server)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from aitp.atomic import publish_jsonl
from aitp.cli.app import app
from aitp.errors import BadInputError

if TYPE_CHECKING:
    from aitp.policies.base import SamplingParams
    from aitp.policies.spec import PolicySpec
    from aitp.reasoning.items import Item

POLICY_HELP = "tiny (built-in, random init), hf (with --model-path), openai (with --base-url), or a checkpoint dir."


def policy_spec(
    policy: str,
    model_path: Path | None = None,
    base_url: str | None = None,
    model: str | None = None,
    endpoint: str = "chat",
    concurrency: int = 8,
    timeout: float = 120.0,
) -> PolicySpec:
    """Turn `--policy` and its options into a `PolicySpec` (local paths must exist)."""
    from aitp.policies.spec import PolicySpec

    if policy == "hf":
        if model_path is None:
            raise BadInputError("--policy hf needs --model-path DIR: a local Hugging Face model directory or .gguf")
        spec = PolicySpec(backend="hf", path=str(model_path))
    elif policy == "openai" or policy.startswith("openai:"):
        url = base_url or policy.partition(":")[2]
        if not url:
            raise BadInputError("--policy openai needs --base-url, e.g. http://127.0.0.1:8000/v1 (see `aitp serve`)")
        if endpoint not in ("chat", "completions"):
            raise BadInputError(f"--endpoint must be chat or completions, got '{endpoint}'")
        return PolicySpec(
            backend="openai", base_url=url, model=model, endpoint=endpoint, concurrency=concurrency, timeout_s=timeout
        )
    elif policy.lstrip().startswith("{"):
        try:
            data = json.loads(policy)
        except json.JSONDecodeError as exc:
            raise BadInputError(f"--policy looks like JSON but is not ({exc.msg}): pass a valid JSON object") from exc
        if not isinstance(data, dict):
            raise BadInputError('--policy JSON must be an object with a "backend" (tiny, hf, openai) or a "path"')
        spec = PolicySpec.parse(data)
    else:
        spec = PolicySpec.parse(policy)
    path = spec.local_path() if spec.path else None
    if path is not None and not path.exists():
        raise BadInputError(
            f"policy path {path} does not exist: pass a checkpoint directory, or tiny, hf or openai with their options"
        )
    return spec


@app.command("rollout")
def rollout_command(
    policy: str = typer.Option(..., help=POLICY_HELP),
    task: str = typer.Option(..., help="reasoning-gym task name (see `aitp tasks`)."),
    n_items: int = typer.Option(8, help="Number of items."),
    group_size: int = typer.Option(4, help="Completions sampled per item."),
    seed: int = typer.Option(0, help="Base seed of items and of sampling."),
    split: str = typer.Option("train", help="train or eval."),
    difficulty: str = typer.Option("none", help="none, random, or a curriculum level."),
    temperature: float = typer.Option(1.0, help="Sampling temperature (0 = greedy)."),
    top_p: float = typer.Option(1.0, help="Nucleus sampling mass."),
    max_tokens: int = typer.Option(256, help="Max tokens per completion."),
    max_token_length: int | None = typer.Option(None, help="Length-penalty cap; default --max-tokens."),
    model_path: Path | None = typer.Option(None, help="Model directory or .gguf for --policy hf."),
    base_url: str | None = typer.Option(None, help="Server URL for --policy openai, e.g. http://HOST:PORT/v1."),
    model: str | None = typer.Option(None, help="Model id on the server (default: its first)."),
    endpoint: str = typer.Option("chat", help="openai: chat (model has a chat template) or completions."),
    concurrency: int = typer.Option(8, help="openai: requests in flight per worker."),
    timeout: float = typer.Option(120.0, help="openai: seconds per request before a retry."),
    device: str | None = typer.Option(None, help="cpu or cuda; default: cuda when workers declare GPUs."),
    dask_address: str | None = typer.Option(None, help="tcp://HOST:PORT of a Dask scheduler; default local."),
    connect_timeout: float = typer.Option(10.0, help="Seconds to wait for the --dask-address scheduler."),
    workers: int | None = typer.Option(None, help="Local cluster size; default one per core (or GPU)."),
    shard_size: int | None = typer.Option(None, help="Items per Dask task; default: about 32 shards."),
    experiment: str = typer.Option("default", help="Experiment name stored on every row."),
    iteration: int = typer.Option(0, help="Iteration stored on every row (and part of the sampling seed)."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Groups JSONL; default stdout."),
    samples_output: Path | None = typer.Option(None, help="Also write one row per sample (lake fields)."),
    progress: bool = typer.Option(True, help="Show a progress bar on stderr."),
) -> None:
    """Sample --group-size completions per item on Dask, score them, write groups as JSONL (`aitp score` fields)."""
    from aitp.fanout.cluster import dask_client
    from aitp.policies.base import SamplingParams
    from aitp.reasoning.items import generate_items, parse_difficulty
    from aitp.reasoning.rollouts.run import group_records, local_gpus, preflight

    _check_rollout_options(n_items, group_size, max_tokens, workers, temperature, top_p, output, samples_output)
    spec = policy_spec(policy, model_path, base_url, model, endpoint, concurrency, timeout)
    preflight(spec)  # before any cluster starts: a bad path or a dead server fails in a second
    items = generate_items(task, n_items, seed, split, parse_difficulty(difficulty))
    params = SamplingParams(n=group_size, temperature=temperature, top_p=top_p, max_tokens=max_tokens)
    kwargs = dict(
        experiment=experiment,
        iteration=iteration,
        seed=seed,
        max_token_length=max_token_length,
        shard_size=shard_size,
        device=device,
    )
    with dask_client(dask_address, workers, local_gpus(spec, device), connect_timeout) as client:
        rows = _sample(items, spec, params, client, progress, kwargs)
    _write(group_records(items, rows), rows, output, samples_output)


def _check_rollout_options(
    n_items: int,
    group_size: int,
    max_tokens: int,
    workers: int | None,
    temperature: float,
    top_p: float,
    output: Path | None,
    samples_output: Path | None,
) -> None:
    """Refuse bad numbers and directory outputs before a model loads or a cluster starts."""
    for name, value in (("--n-items", n_items), ("--group-size", group_size), ("--max-tokens", max_tokens)):
        if value < 1:
            raise BadInputError(f"{name} must be at least 1, got {value}")
    if workers is not None and workers < 1:
        raise BadInputError(f"--workers must be at least 1, got {workers}")
    if not 0.0 <= temperature <= 2.0 or not 0.0 < top_p <= 1.0:
        raise BadInputError("--temperature must be in [0, 2] and --top-p in (0, 1]")
    for name, path in (("--output", output), ("--samples-output", samples_output)):
        if path is not None and path.is_dir():
            raise BadInputError(f"{name} {path} is a directory: pass a file path for the JSONL")


def _sample(
    items: list[Item], spec: PolicySpec, params: SamplingParams, client: Any, progress: bool, kwargs: dict[str, Any]
) -> list[dict[str, Any]]:
    """The sample rows of every item, with a progress bar on stderr when asked (stdout may carry the JSONL)."""
    from aitp.reasoning.rollouts.run import run_rollouts

    if not progress:
        return run_rollouts(items, spec, params, client, **kwargs)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("rollouts"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True)) as bar:
        job = bar.add_task("rollouts", total=len(items))
        return run_rollouts(
            items, spec, params, client, on_progress=lambda done, total: bar.update(job, completed=done), **kwargs
        )


def _write(groups: list[dict[str, Any]], rows: list[dict[str, Any]], output: Path | None, samples: Path | None) -> None:
    """Publish the groups (and sample rows) whole, or stream the groups to stdout when no --output is given."""
    if samples is not None:
        publish_jsonl(samples, rows)
    if output is not None:
        publish_jsonl(output, groups)
    else:
        for record in groups:
            sys.stdout.write(json.dumps(record, default=str) + "\n")
        sys.stdout.flush()


@app.command("serve")
def serve_command(
    policy: str = typer.Option(..., help="tiny, hf (with --model-path), or a checkpoint directory."),
    host: str = typer.Option("127.0.0.1", help="Interface to bind; loopback by default."),
    port: int = typer.Option(8000, help="Port to listen on (0 picks a free one; the URL is printed)."),
    model_path: Path | None = typer.Option(None, help="Model directory or .gguf for --policy hf."),
    model_name: str | None = typer.Option(None, help="Model id clients ask for; default the policy's name."),
    device: str | None = typer.Option(None, help="cpu or cuda; default: cuda when available."),
    max_request_tokens: int | None = typer.Option(
        None, help="Refuse requests asking for more tokens in all (prompts x n x max_tokens); default 65536."
    ),
    max_body_bytes: int = typer.Option(1 << 20, help="Refuse (413) request bodies larger than this many bytes."),
    request_timeout: float = typer.Option(60.0, help="Seconds a client has to send a whole request (then 408/400)."),
) -> None:
    """Serve a local policy over an OpenAI-compatible HTTP API (/v1/models, /v1/chat/completions, /v1/completions)."""
    if policy == "openai":
        raise BadInputError("--policy openai is already a server: serve tiny, hf or a checkpoint directory")
    if max_request_tokens is not None and max_request_tokens < 1:
        raise BadInputError(f"--max-request-tokens must be at least 1, got {max_request_tokens}")
    if max_body_bytes < 1 or not 0 < request_timeout < float("inf"):
        raise BadInputError("--max-body-bytes must be at least 1 and --request-timeout a positive number of seconds")
    spec = policy_spec(policy, model_path)
    from aitp.policies.loading import load_policy
    from aitp.serve import DEFAULT_MAX_REQUEST_TOKENS, bind, serve

    sock = bind(host, port)  # a busy port fails before minutes of model loading, not after
    limit = max_request_tokens or DEFAULT_MAX_REQUEST_TOKENS
    loaded = load_policy(spec, device=device)
    serve(
        loaded,
        model_name=model_name,
        sock=sock,
        max_request_tokens=limit,
        max_body_bytes=max_body_bytes,
        request_timeout_s=request_timeout,
    )
