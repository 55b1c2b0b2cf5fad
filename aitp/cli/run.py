"""`aitp run` (the loop under Prefect, with a live display) and `aitp services up|down|status`.

Everything a run writes goes under `--home`: the lake, `mlflow.db`, artifacts, checkpoints and the
Prefect server's database. Without `PREFECT_API_URL`, a Prefect server is started on loopback for
the run and stopped after it (or the one `aitp services up` recorded is used). Bad input (config,
experiment, home) is refused before any service starts, so nothing is half-written. A server that
dies mid-run ends it within seconds, and a full disk anywhere is reported once, each in one line
with the `--resume` command that continues. Prefect is imported only inside the command: the
library itself never imports it.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import typer

from aitp.cli.app import app, fail
from aitp.errors import AitpError, BadInputError

services_app = typer.Typer(help="Local Prefect and MLflow servers for a home.", no_args_is_help=True)
app.add_typer(services_app, name="services")

HOME_HELP = "Home directory for everything the run writes (default: $AITP_HOME, else ./data)."


def writable_home(home: Path | None) -> Path:
    """The resolved home, checked writable with a probe file (a one-line error otherwise)."""
    from aitp.home import resolve_home

    try:
        root = resolve_home(home)
        probe = root / f".aitp-write-probe-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        where = home if home is not None else os.environ.get("AITP_HOME", "./data")
        raise BadInputError(
            f"home directory {where} is not writable ({exc.strerror or exc}): pass --home DIR for a directory you "
            "can write"
        ) from None
    return root


class LiveDisplay:
    """Prints stage timings, rollout progress and each iteration's held-out pass rates as they happen."""

    def __init__(self, stream: Any = sys.stdout) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.t0 = time.perf_counter()

    def _print(self, text: str) -> None:
        clock = time.perf_counter() - self.t0
        self.stream.write(f"\r[{clock // 60:3.0f}:{clock % 60:04.1f}] {text}\n")
        self.stream.flush()

    def __call__(self, kind: str, p: dict[str, Any]) -> None:
        if kind == "stage" and p["state"] == "done":
            self._print(f"iter {p['iteration']:>2}  {p['stage']:<22} {p['seconds']:6.1f}s")
        elif kind == "progress" and self.tty:
            self.stream.write(f"\r          iter {p['iteration']:>2}  rollouts {p['done']}/{p['total']} items ")
            self.stream.flush()
        elif kind in ("rollouts", "released") and p.get("text"):
            self._print(f"iter {p['iteration']:>2}  {p['text']}")
        elif kind == "rollouts":
            self._print(
                f"iter {p['iteration']:>2}  kept {p['kept_groups']}/{p['groups']} groups, "
                f"sample pass rate {p['sample_pass_rate'] or 0.0:.3f}"
            )
        elif kind == "iteration":
            self._iteration(p)

    def _iteration(self, p: dict[str, Any]) -> None:
        row, metrics = p["row"], p.get("eval") or {}
        if p.get("reused"):
            self._print(f"iter {p['iteration']:>2}  already done: champion pass rate {row.get('champion_pass_rate')}")
            return
        tasks = sorted({k.split("/")[0] for k in metrics if k.endswith("/pass_rate") and not k.startswith("level_")})
        per_task = "  ".join(f"{t} {metrics[f'{t}/pass_rate']:.2f}" for t in tasks)
        verdict = "promoted" if row.get("promoted") else "kept champion"
        model = row.get("eval_pass_rate")
        shown = f"{model:.3f}" if model is not None else "-"
        self._print(
            f"iter {p['iteration']:>2}  held-out {shown} ({per_task or 'not trained'})  {verdict}; "
            f"champion v{row.get('champion_version')} {row.get('champion_pass_rate') or 0.0:.3f}"
        )


def _prefect_env(home: Path, verbose: bool) -> None:
    """Client-side Prefect and MLflow settings, before either is imported: state under <home>, quiet console.

    Quiet means a failure reaches the console once, as the CLI's one line: Prefect still records the failed
    task and flow runs on its server, and --verbose shows both libraries' logs.
    """
    os.environ.setdefault("PREFECT_HOME", str(home / "prefect"))
    if not verbose:
        logging.raiseExceptions = False  # a log the server refused (full disk: 500) is not printed to stderr either
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "CRITICAL")
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_FLOW_RUNS_LEVEL", "CRITICAL")
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_TASK_RUNS_LEVEL", "CRITICAL")
        os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "CRITICAL")


def _drain_prefect() -> None:
    """Send Prefect's queued logs and events before the server it talks to stops."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all()
    EventsWorker.drain_all()


@app.command("run")
def run_command(
    config: Path | None = typer.Option(None, help="Loop config YAML (default: configs/quickstart.yaml)."),
    set_: list[str] = typer.Option([], "--set", help="Override a config key, e.g. --set iterations=2 (repeatable)."),
    home: Path | None = typer.Option(None, help=HOME_HELP),
    resume: str | None = typer.Option(None, help="Continue this experiment at its first stage not committed."),
    new_version: bool = typer.Option(False, "--new-version", help="Accept a changed config for an experiment."),
    iterations: int | None = typer.Option(  # max: aitp.loop.config.MAX_ITERATION (seeds stay distinct, in range)
        None, min=0, max=999, help="Run up to this iteration (default: the config's)."
    ),
    dask_address: str | None = typer.Option(None, help="Existing Dask scheduler (default: a local cluster)."),
    report: bool = typer.Option(True, help="Write the HTML report at the end."),
    verbose: bool = typer.Option(False, help="Show Prefect's and MLflow's own logs on the console."),
) -> None:
    """Run the loop (eval -> filter -> train -> promote) as Prefect flow runs, one per iteration."""
    from aitp.disk import disk_full_error
    from aitp.fanout.cluster import check_device
    from aitp.loop.experiment import check_experiment, experiment_config
    from aitp.loop.writer_lock import writer_lock
    from aitp.service_watch import WatchedService, run_services, watch_services
    from aitp.services import apply_offline_env, mlflow_uri, prefect_api

    root = writable_home(home)
    cfg = experiment_config(root, str(config) if config else None, list(set_), resume)
    check_device(cfg.device)  # `device: cuda` without a visible GPU stops here, before any service
    check_experiment(root, cfg, new_version)
    apply_offline_env()
    _prefect_env(root, verbose)
    # A run ended by its service watcher (or a kill) leaves Dask's semaphores to multiprocessing's resource
    # tracker, which removes them and then warns that it did, after the one-line error: keep that quiet.
    os.environ["PYTHONWARNINGS"] = ",".join(
        filter(None, [os.environ.get("PYTHONWARNINGS"), "ignore:resource_tracker:UserWarning"])
    )
    display = LiveDisplay()
    print(f"experiment {cfg.experiment}: {cfg.environment.type}, iterations 0..{cfg.iterations}; home {root}")
    resume_hint = f"aitp run --resume {cfg.experiment} --home {shlex.quote(str(root))}"
    try:
        # One writer per experiment, taken before any service starts so a second run is refused at once; the
        # loop flow takes it too (a deployment's run has no CLI around it) and joins this process's hold.
        with writer_lock(root, cfg.experiment), prefect_api(root) as url:
            print(f"Prefect API {url}")
            from flows.loop import loop_flow

            def stop(dead: WatchedService) -> None:  # a server killed by a full disk is a full disk
                _stop_run(disk_full_error(None, root, resume_hint) or dead.died(root, resume_hint))

            with watch_services(run_services(root, url, mlflow_uri(root)), stop):
                try:
                    loop_flow.with_options(flow_run_name=f"{cfg.experiment}-loop")(
                        config=cfg,
                        home=str(root),
                        iterations=iterations,
                        new_version=new_version,
                        dask_address=dask_address,
                        listeners=[display],
                    )
                finally:
                    _drain_prefect()
        _finish(root, cfg.experiment, report)
    except Exception as exc:  # a full disk shows in as many ways as there are writers: say it once
        full = disk_full_error(exc, root, resume_hint)
        if full is None:
            raise
        raise full from None


def _stop_run(error: AitpError) -> None:
    """From the service watcher: print the one-line error and end the process now (every stage is committed)."""
    from aitp.service_watch import end_local_workers

    end_local_workers()
    sys.stdout.flush()
    try:
        fail(str(error))
    except SystemExit as stop:
        os._exit(stop.code)


def _summary_table(root: Path, experiment: str) -> None:
    """Per iteration: the trained model's held-out pass rate, the champion's, the kept-group rate, the decision."""
    from aitp.lake import connect

    con = connect(root)
    try:
        rows = con.execute(
            """SELECT iteration, eval_pass_rate, champion_version, champion_pass_rate, kept_group_rate, promoted
               FROM iterations WHERE experiment = $e ORDER BY iteration""",
            {"e": experiment},
        ).fetchall()
    finally:
        con.close()
    show = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    print("iteration  model  champion       kept-groups  promoted")
    for k, rate, version, champ, kept, promoted in rows:
        print(f"{k:>9}  {show(rate):>5}  v{version or '-':<3} {show(champ):>5}  {show(kept):>11}  {promoted}")


def _finish(root: Path, experiment: str, report: bool) -> None:
    from aitp.loop.stats import champion_gain

    _summary_table(root, experiment)

    try:
        gain = champion_gain(root, experiment)
        print(f"last champion vs first: {gain.rate_a:.3f} -> {gain.rate_b:.3f}, gain {gain}")
    except AitpError as exc:
        print(f"no champion gain to show: {exc}")
    if report:
        from aitp.report.html import write_report

        out = write_report(root, experiment, root / "reports" / f"{experiment}.html")
        print(f"report {out}")


@services_app.command("up")
def services_up_command(
    home: Path | None = typer.Option(None, help=HOME_HELP),
    prefect_port: int | None = typer.Option(None, help="Port of the Prefect server (default: a free one)."),
    mlflow_port: int | None = typer.Option(None, help="Port of the MLflow server (default: a free one)."),
) -> None:
    """Start a Prefect server and an MLflow server for a home (on 127.0.0.1) and print their URLs."""
    from aitp.disk import disk_full_error
    from aitp.services import ServiceError, services_up

    root = writable_home(home)
    try:
        services = services_up(root, prefect_port=prefect_port, mlflow_port=mlflow_port)
    except ServiceError as exc:  # a server that cannot start on a full disk: say the disk
        raise disk_full_error(exc, root, f"aitp services up --home {shlex.quote(str(root))}") or exc from None
    for name, service in services.items():
        print(f"{name}\t{service.url}\tpid {service.pid}")
    print(f"export PREFECT_API_URL={services['prefect'].url} MLFLOW_TRACKING_URI={services['mlflow'].url}")


@services_app.command("down")
def services_down_command(home: Path | None = typer.Option(None, help=HOME_HELP)) -> None:
    """Stop the servers `aitp services up` started for a home."""
    from aitp.home import require_home, resolve_home
    from aitp.services import services_down

    require_home(home)
    stopped = services_down(resolve_home(home))
    print("stopped " + (", ".join(stopped) if stopped else "nothing (no services recorded)"))


@services_app.command("status")
def services_status_command(home: Path | None = typer.Option(None, help=HOME_HELP)) -> None:
    """Show the servers recorded for a home that still answer."""
    from aitp.home import require_home, resolve_home
    from aitp.services import recorded_services

    require_home(home)
    found = recorded_services(resolve_home(home))
    for name, service in found.items():
        print(f"{name}\t{service.url}\tpid {service.pid}")
    if not found:
        print("no services running for this home: start them with aitp services up")
