"""Command-line entry point: importing each command module registers its commands on the app."""

from aitp.cli import demo, envs  # noqa: F401
from aitp.cli import lake as _lake  # noqa: F401
from aitp.cli import prove as _prove  # noqa: F401
from aitp.cli import prove_steps as _prove_steps  # noqa: F401
from aitp.cli import report as _report  # noqa: F401
from aitp.cli import rollout as _rollout  # noqa: F401
from aitp.cli import run as _run  # noqa: F401
from aitp.cli import train as _train  # noqa: F401
from aitp.cli import viz as _viz  # noqa: F401
from aitp.cli.app import app, run_app

__all__ = ["app", "main"]


def main() -> None:
    run_app()
