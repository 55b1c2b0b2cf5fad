"""Shared by the rollout and serving tests: a small tiny-model checkpoint, subprocess environment, free ports."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def make_tiny_checkpoint(path: Path, seed: int = 0) -> Path:
    """A random-init tiny model small enough to sample fast on one core, long enough for task prompts."""
    import torch

    from aitp.policies.tiny import TinyConfig, TinyTransformer, save_checkpoint

    torch.manual_seed(seed)
    model = TinyTransformer(TinyConfig(n_layer=2, n_head=2, d_model=64, max_seq_len=1024))
    return save_checkpoint(path, model, meta={"note": "test"})


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment of an aitp/dask subprocess: the repo importable, one thread, quiet telemetry."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1", **extra)
    return env


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(policy: str, log_path: Path, timeout_s: float = 60.0, args: tuple[str, ...] = ()):
    """Start `aitp serve --policy POLICY --port 0 [ARGS]` as a subprocess; return (process, base_url)."""
    import re
    import subprocess
    import time

    log = open(log_path, "w+b")
    proc = subprocess.Popen(
        [PYTHON, "-m", "aitp", "serve", "--policy", policy, "--port", "0", *args],
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace")
        found = re.search(r"serving \S+ at (http://\S+/v1)", text)
        if found:
            return proc, found.group(1)
        if proc.poll() is not None:
            raise RuntimeError(f"aitp serve exited with {proc.returncode}: {text}")
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"aitp serve did not start within {timeout_s}s: {log_path.read_text(errors='replace')}")


def stop(proc) -> None:
    """Terminate a subprocess we started, killing it if it lingers."""
    import subprocess

    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
