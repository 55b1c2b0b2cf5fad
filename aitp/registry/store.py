"""MLflow tracking and the model registry: a parent run per experiment, a child run per iteration,
a model version per trained checkpoint, and promotion by aliases.

Store: `MLFLOW_TRACKING_URI` when set (a tracking server at scale), else SQLite at `<home>/mlflow.db`
with artifacts under `<home>/mlartifacts`. Each experiment has one registered model,
`aitp-<experiment>`, whose aliases are `challenger` (the latest trained version), `champion`
(the version in use) and `previous-champion` (what `rollback` restores). `champion` moves only
when the challenger beats it on the same eval set by the margin, and only once every check has
passed: an error at any step leaves it where it was. MLflow is imported here alone, lazily.
"""

from __future__ import annotations

import json
import os
import tempfile
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aitp.errors import AitpError

CHAMPION, CHALLENGER, PREVIOUS = "champion", "challenger", "previous-champion"
TAG = "aitp."


class RegistryError(AitpError):
    """The tracking server or registry could not be reached or refused a call."""


class PromotionError(AitpError):
    """A promotion or rollback that cannot be decided with what was given."""


class PromotionConfig(BaseModel):
    """How a challenger must beat the champion."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    metric: Literal["pass_rate", "mean_score", "format_ok_rate"] = "pass_rate"
    """Overall eval metric compared (format_ok_rate: a weak criterion for models too small to pass)."""
    margin: float = Field(0.0, ge=0.0)
    """The challenger wins when its metric exceeds the champion's by more than 0 and by at least this."""
    rule: Literal["margin", "paired"] = "margin"
    """`margin`: any strict gain of at least `margin` wins. `paired`: the gain must also be evidence, its paired
    bootstrap 95 % interval over the same held-out items above zero (pass_rate only): for long runs where a lucky
    +2 items must not replace the champion; costs promotions a margin rule would make on small true gains."""

    @model_validator(mode="after")
    def _paired_compares_pass_rates(self) -> PromotionConfig:
        if self.rule == "paired" and self.metric != "pass_rate":
            raise ValueError("promotion.rule: paired compares items' pass rates: set promotion.metric: pass_rate")
        return self


@dataclass
class ModelVersion:
    """A registered checkpoint: registry version, content id of the weights, where they are."""

    name: str
    version: str
    model_version: str
    checkpoint: str
    run_id: str
    source: str
    tags: dict[str, str]


@dataclass
class Decision:
    """The outcome of a promotion or rollback, with both scores."""

    promoted: bool
    reason: str
    challenger: str
    champion: str | None
    challenger_score: float | None
    champion_score: float | None
    metric: str
    margin: float
    eval_name: str | None
    rule: str = "margin"
    gain_low: float | None = None  # the paired rule's 95 % interval of challenger - champion
    gain_high: float | None = None

    @property
    def paired(self) -> bool:
        """Decided by the paired rule against a champion, so it has an interval."""
        return self.gain_low is not None and self.gain_high is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def default_tracking_uri(home: Path) -> str:
    """`MLFLOW_TRACKING_URI`, else SQLite under the home."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{home / 'mlflow.db'}"


def model_name(experiment: str) -> str:
    """The registered model of an experiment."""
    return f"aitp-{experiment}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return " ".join(text.splitlines()[0].split())[:300] if text else type(exc).__name__


class Registry:
    """The MLflow tracking store and model registry of a home."""

    def __init__(self, home: str | Path, tracking_uri: str | None = None) -> None:
        from aitp.home import resolve_home

        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
        self.home = resolve_home(home)
        self.uri = tracking_uri or default_tracking_uri(self.home)
        self.local = self.uri.startswith("sqlite:") or self.uri.startswith("file:")
        self._iteration_runs: dict[tuple[str, int], str] = {}
        self._flow_run_tags: dict[str, str] = {}

    @cached_property
    def client(self):
        """The MLflow client, after checking that a server URI answers (or that a SQLite store is whole)."""
        if self.uri.startswith(("http://", "https://")):
            try:
                urllib.request.urlopen(self.uri.rstrip("/") + "/health", timeout=3).close()
            except Exception as exc:
                raise RegistryError(
                    f"MLflow tracking server {self.uri} is unreachable ({_first_line(exc)}): start it or fix "
                    "MLFLOW_TRACKING_URI (unset it to use <home>/mlflow.db)"
                ) from None
        from mlflow import MlflowClient

        from aitp.registry.tracking_store import prepare_store, sqlite_path

        store = sqlite_path(self.uri)
        if store is not None:  # built aside and linked in whole: an interrupted set-up never bricks the home
            prepare_store(store)
        return MlflowClient(tracking_uri=self.uri, registry_uri=self.uri)

    def call(self, what: str, fn, *args, **kwargs):
        """Run one MLflow call; any failure becomes a one-line RegistryError."""
        try:
            return fn(*args, **kwargs)
        except AitpError:
            raise
        except Exception as exc:
            raise RegistryError(
                f"MLflow at {self.uri} failed to {what} ({_first_line(exc)}): check MLFLOW_TRACKING_URI and the server"
            ) from None

    # -- runs ------------------------------------------------------------------------------

    def experiment_id(self, experiment: str) -> str:
        """The MLflow experiment of an aitp experiment (created, with its artifact root, on first use)."""
        found = self.call("look up the experiment", self.client.get_experiment_by_name, experiment)
        if found is not None:
            return found.experiment_id
        location = (self.home / "mlartifacts" / experiment).as_uri() if self.local else None
        return self.call("create the experiment", self.client.create_experiment, experiment, location)

    def _find_run(self, experiment_id: str, tags: dict[str, str]) -> str | None:
        where = " and ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items())
        runs = self.call("search runs", self.client.search_runs, [experiment_id], where, max_results=1)
        return runs[0].info.run_id if runs else None

    def parent_run(self, experiment: str) -> str:
        """The experiment's parent run (created on first use)."""
        eid = self.experiment_id(experiment)
        tags = {TAG + "role": "experiment"}
        found = self._find_run(eid, tags)
        if found:
            return found
        return self.call("create a run", self.client.create_run, eid, tags=tags, run_name=experiment).info.run_id

    def iteration_run(self, experiment: str, iteration: int, flow_run_id: str | None = None) -> str:
        """The child run of one iteration (created on first use), tagged with the flow run id if given.

        Remembered per registry object: an iteration's stages ask for it a dozen times, three lookups each.
        """
        run_id = self._iteration_runs.get((experiment, iteration))
        if run_id is None:
            run_id = self._iteration_runs[experiment, iteration] = self._open_iteration_run(experiment, iteration)
        if flow_run_id and self._flow_run_tags.get(run_id) != flow_run_id:
            self.call("tag a run", self.client.set_tag, run_id, TAG + "flow_run_id", flow_run_id)
            self._flow_run_tags[run_id] = flow_run_id
        return run_id

    def _open_iteration_run(self, experiment: str, iteration: int) -> str:
        eid, parent = self.experiment_id(experiment), self.parent_run(experiment)
        tags = {TAG + "role": "iteration", TAG + "iteration": str(iteration)}
        run_id = self._find_run(eid, tags)
        if run_id is None:
            run_tags = {**tags, "mlflow.parentRunId": parent, TAG + "experiment": experiment}
            name = f"{experiment}-iter-{iteration:03d}"
            run_id = self.call("create a run", self.client.create_run, eid, tags=run_tags, run_name=name).info.run_id
        return run_id

    @contextmanager
    def experiment_run(self, experiment: str) -> Iterator[str]:
        """The parent run: RUNNING while a loop runs on it, then FINISHED (FAILED if it raised, KILLED if stopped).

        A resumed loop reopens it; without this it stayed RUNNING forever once created.
        """
        run_id = self.parent_run(experiment)
        self.call("reopen a run", self.client.update_run, run_id, "RUNNING")
        try:
            yield run_id
        except BaseException as exc:
            status = "KILLED" if isinstance(exc, KeyboardInterrupt | SystemExit) else "FAILED"
            try:
                self.call("end a run", self.client.set_terminated, run_id, status)
            except RegistryError:
                pass  # the loop's own error is the one to show
            raise
        self.call("end a run", self.client.set_terminated, run_id, "FINISHED")

    def finish_iteration(self, experiment: str, iteration: int, status: str = "FINISHED") -> None:
        """Mark an iteration's run finished (or FAILED)."""
        self.call("end a run", self.client.set_terminated, self.iteration_run(experiment, iteration), status)

    def log_params(self, run_id: str, params: dict[str, Any]) -> None:
        """Log params; a rerun that changes one records the new value as a `rerun.<key>` tag (params are immutable)."""
        from mlflow.entities import Param

        have = self.call("read a run", self.client.get_run, run_id).data.params
        flat = {k: str(v)[:6000] for k, v in _flatten(params).items()}
        new = [Param(k, v) for k, v in flat.items() if k not in have]
        if new:
            self.call("log params", self.client.log_batch, run_id, params=new)
        for k, v in flat.items():
            if k in have and have[k] != v:
                self.call("tag a run", self.client.set_tag, run_id, f"rerun.{k}", v[:5000])

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int = 0) -> None:
        """Log metrics of one step; None values are skipped and names made MLflow-safe."""
        self._log_points(run_id, [(k, v, step) for k, v in metrics.items()])

    def log_series(self, run_id: str, name: str, values: list[float | None]) -> None:
        """Log one metric at steps 0, 1, … together (a call per step was a round trip per training step)."""
        self._log_points(run_id, [(name, v, step) for step, v in enumerate(values)])

    def _log_points(self, run_id: str, points: list[tuple[str, float | None, int]]) -> None:
        """(name, value, step) points in batches of 1,000; None values skipped, names made MLflow-safe."""
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(_metric_key(k), float(v), now, step) for k, v, step in points if v is not None]
        for start in range(0, len(batch), 1000):
            self.call("log metrics", self.client.log_batch, run_id, metrics=batch[start : start + 1000])

    def log_json(self, run_id: str, obj: Any, artifact_file: str) -> None:
        """Log a JSON (or, for a list of dicts, JSONL) artifact."""
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / Path(artifact_file).name
            if artifact_file.endswith(".jsonl"):
                path.write_text("".join(json.dumps(r, default=str) + "\n" for r in obj))
            else:
                path.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str))
            folder = str(Path(artifact_file).parent) if "/" in artifact_file else None
            self.call("log an artifact", self.client.log_artifact, run_id, str(path), folder)

    @contextmanager
    def system_metrics(self, run_id: str, interval: float = 10.0) -> Iterator[None]:
        """Sample CPU/GPU/memory into the run while the block runs."""
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        monitor = SystemMetricsMonitor(run_id, sampling_interval=interval, tracking_uri=self.uri)
        monitor.start()
        try:
            yield
        finally:
            monitor.finish()

    def log_training(
        self, experiment: str, iteration: int, checkpoint: str | Path, flow_run_id: str | None = None
    ) -> str:
        """Log a trained checkpoint's config (params), losses and throughput (metrics) and record to its run."""
        from aitp.checkpoints import read_record

        record = read_record(checkpoint)
        run_id = self.iteration_run(experiment, iteration, flow_run_id)
        self.log_params(run_id, {"train": record.get("config", {}), "base": record.get("base")})
        self.log_series(run_id, "train/loss", record.get("losses", []))
        seconds = record.get("seconds") or 0.0
        self.log_metrics(
            run_id,
            {
                "train/examples": record.get("examples", 0),
                "train/tokens": record.get("tokens", 0),
                "train/seconds": seconds,
                "train/tokens_per_s": record.get("tokens", 0) / seconds if seconds else 0.0,
                # grpo: how far the trainer's log-probs are from the sampler's on the same tokens
                **({"train/logprob_gap": record["logprob_gap"]} if record.get("logprob_gap") is not None else {}),
                **({"train/groups": record["groups"]} if record.get("groups") is not None else {}),
                "train/steps": record.get("steps", 0),
            },
        )
        self.log_json(run_id, record, "train/training.json")
        return run_id

    def log_eval(self, result: Any, role: str = "challenger", flow_run_id: str | None = None) -> str:
        """Log an EvalResult's metrics (overall, per task, per level) and its samples to the iteration's run."""
        run_id = self.iteration_run(result.experiment, result.iteration, flow_run_id)
        self.call("tag a run", self.client.set_tag, run_id, TAG + "eval_name", result.eval_name)
        self.log_metrics(run_id, {f"eval/{role}/{k}": v for k, v in result.metrics().items()})
        if result.samples:
            self.log_json(run_id, result.samples, f"eval/{role}-{result.model_version}.jsonl")
        return run_id

    # -- versions --------------------------------------------------------------------------

    def register(
        self, experiment: str, iteration: int, checkpoint: str | Path, flow_run_id: str | None = None
    ) -> ModelVersion:
        """Log a checkpoint as an artifact of the iteration's run, register it, and point `challenger` at it."""
        from aitp.checkpoints import ZERO_DIR, verify_checkpoint
        from aitp.fingerprint import fingerprint

        checkpoint = Path(checkpoint).resolve()
        verify_checkpoint(checkpoint)
        run_id = self.iteration_run(experiment, iteration, flow_run_id)
        for entry in sorted(checkpoint.iterdir()):  # the ZeRO state stays local: it only resumes training
            if entry.is_file():
                self.call("log the checkpoint", self.client.log_artifact, run_id, str(entry), "checkpoint")
            elif entry.name != ZERO_DIR:
                self.call(
                    "log the checkpoint", self.client.log_artifacts, run_id, str(entry), f"checkpoint/{entry.name}"
                )
        name = model_name(experiment)
        from mlflow.exceptions import MlflowException

        try:
            self.client.get_registered_model(name)
        except MlflowException:  # not registered yet (other failures surface in the create call)
            self.call("create the registered model", self.client.create_registered_model, name)
        source = self.call("read a run", self.client.get_run, run_id).info.artifact_uri + "/checkpoint"
        tags = {
            TAG + "model_version": fingerprint(checkpoint),
            TAG + "checkpoint": str(checkpoint),
            TAG + "iteration": str(iteration),
            TAG + "experiment": experiment,
        }
        mv = self.call("register the model", self.client.create_model_version, name, source, run_id, tags=tags)
        self.call("set an alias", self.client.set_registered_model_alias, name, CHALLENGER, mv.version)
        return self.get(experiment, str(mv.version))

    def get(self, experiment: str, ref: str) -> ModelVersion | None:
        """A version by number or alias (None when the alias is unset or the version unknown)."""
        from mlflow.exceptions import MlflowException

        name, client = model_name(experiment), self.client
        try:
            if ref.isdigit():
                mv = client.get_model_version(name, ref)
            else:
                mv = client.get_model_version_by_alias(name, ref)
        except MlflowException as exc:
            if getattr(exc, "error_code", "") in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "NOT_FOUND"):
                return None
            raise RegistryError(f"MLflow at {self.uri} failed to read {name} {ref} ({_first_line(exc)})") from None
        except Exception as exc:
            raise RegistryError(f"MLflow at {self.uri} failed to read {name} {ref} ({_first_line(exc)})") from None
        tags = dict(mv.tags or {})
        return ModelVersion(
            name,
            str(mv.version),
            tags.get(TAG + "model_version", ""),
            tags.get(TAG + "checkpoint", ""),
            mv.run_id or "",
            mv.source,
            tags,
        )

    def aliases(self, experiment: str) -> dict[str, str]:
        """Alias -> version number of the experiment's model ({} before the first registration)."""
        from mlflow.exceptions import MlflowException

        client = self.client
        try:
            model = client.get_registered_model(model_name(experiment))
        except MlflowException:
            return {}
        except Exception as exc:
            raise RegistryError(f"MLflow at {self.uri} failed to read aliases ({_first_line(exc)})") from None
        return {alias: str(version) for alias, version in (model.aliases or {}).items()}

    def checkpoint_path(self, mv: ModelVersion) -> Path:
        """A local directory holding the version's weights: where it was trained, else downloaded."""
        from aitp.checkpoints import CheckpointError, verify_checkpoint

        if mv.checkpoint:
            try:
                verify_checkpoint(mv.checkpoint)
                return Path(mv.checkpoint)
            except CheckpointError:
                pass
        import mlflow.artifacts

        target = self.home / "checkpoints" / "_registry" / mv.name / f"v{mv.version}"
        target.mkdir(parents=True, exist_ok=True)
        path = self.call(
            "download the checkpoint",
            mlflow.artifacts.download_artifacts,
            artifact_uri=mv.source,
            dst_path=str(target),
            tracking_uri=self.uri,
        )
        verify_checkpoint(path)
        return Path(path)

    def tag_version(self, experiment: str, version: str, tags: dict[str, Any]) -> None:
        """Set tags on a model version (None becomes an empty string)."""
        for key, value in tags.items():
            self.call(
                "tag a version",
                self.client.set_model_version_tag,
                model_name(experiment),
                version,
                key,
                "" if value is None else str(value),
            )

    def set_alias(self, experiment: str, alias: str, version: str | None) -> None:
        """Point an alias at a version, or delete it (version None)."""
        name = model_name(experiment)
        if version is None:
            self.call("delete an alias", self.client.delete_registered_model_alias, name, alias)
        else:
            self.call("set an alias", self.client.set_registered_model_alias, name, alias, version)


def _flatten(obj: Any) -> dict[str, Any]:
    """Dotted keys for MLflow params; lists as JSON text (params are strings)."""
    from aitp.configs import flatten

    return {k: json.dumps(v) if isinstance(v, list) else v for k, v in flatten(obj).items()}


def _metric_key(key: str) -> str:
    return "".join(c if c.isalnum() or c in "_-./ " else "_" for c in key)
