"""Build any policy from its spec (`aitp.policies.spec.PolicySpec`: a path, a short name, a YAML file, a dict).

Run `python -m aitp.policies.loading SPEC [QUESTION]` to load a policy and print one completion.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch

from aitp.errors import AitpError
from aitp.policies.base import Policy
from aitp.policies.spec import PolicyLoadError, PolicySpec


def load_policy(spec: PolicySpec | str | Path | dict[str, Any], device: str | torch.device | None = None) -> Policy:
    """Build the policy a spec describes (see `aitp.policies.spec`), on `device` (default: cuda if any)."""
    spec = PolicySpec.parse(spec)
    backend = spec.backend or backend_of(_require_path(spec))
    if backend == "tiny":
        return _load_tiny(spec, device)
    if backend == "hf":
        from aitp.policies.hf import HFPolicy

        return HFPolicy.from_path(_require_path(spec), device=device, dtype=spec.dtype)
    from aitp.policies.openai_backend import OpenAIPolicy

    return OpenAIPolicy.from_spec(spec.openai_options())


def _require_path(spec: PolicySpec) -> Path:
    path = spec.local_path()
    if path is None:
        raise PolicyLoadError(f"a {spec.backend} policy needs a path: pass a checkpoint directory or a .gguf file")
    if not path.exists():
        raise PolicyLoadError(f"policy path {path} does not exist: pass a checkpoint directory or a .gguf file")
    return path


def backend_of(path: Path) -> str:
    """Which backend loads `path`."""
    from aitp.checkpoints import is_tiny_checkpoint

    if path.is_file():
        if path.suffix == ".gguf":
            return "hf"
    elif is_tiny_checkpoint(path):
        return "tiny"
    elif (path / "config.json").is_file():
        return "hf"
    raise PolicyLoadError(
        f"{path} is not a policy checkpoint: pass a tiny checkpoint directory, a Hugging Face model "
        "directory (config.json and weights) or a .gguf file"
    )


def _load_tiny(spec: PolicySpec, device) -> Policy:
    from aitp.fingerprint import fingerprint
    from aitp.policies.tiny import TinyConfig, TinyPolicy, TinyTransformer, load_checkpoint

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if spec.path:
        path = _require_path(spec)
        model, tokenizer, _ = load_checkpoint(path, device)
        return TinyPolicy(model, tokenizer, name=path.name, version=fingerprint(path))
    config = TinyConfig.from_dict(spec.config or {})
    seed = spec.seed
    # Initialise under a private RNG so loading a policy never moves the caller's random stream.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = TinyTransformer(config)
    sizes = hashlib.sha256(json.dumps(config.to_dict(), sort_keys=True).encode()).hexdigest()[:8]
    version = f"init-{seed}-{sizes}"
    return TinyPolicy(model.to(device).eval(), name="tiny", version=version)


def main(argv: list[str] | None = None) -> None:
    """Load a policy from a spec and print one completion of a question (a smoke check)."""
    import sys

    from aitp.policies.base import SamplingParams

    args = sys.argv[1:] if argv is None else argv
    if not args:
        raise SystemExit("usage: python -m aitp.policies.loading SPEC [QUESTION]")
    question = args[1] if len(args) > 1 else "What is 17 + 25?"
    try:
        policy = load_policy(args[0])
    except AitpError as exc:
        raise SystemExit(f"error: {exc}") from None
    [[completion]] = policy.sample([[{"role": "user", "content": question}]], SamplingParams(max_tokens=64))
    print(f"{policy.name} ({policy.version}): {completion.text!r} [{completion.finish_reason}]")


if __name__ == "__main__":
    main()
