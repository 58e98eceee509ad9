"""Experiment trackers, offline: ``--report-to tensorboard,trackio,wandb,mlflow`` (several allowed; default none) for
finetune.train, scratch.train and harness.eval. Each writes local files under the run directory (tensorboard/,
trackio/, wandb/, mlruns/), which its own viewer opens (``tensorboard --logdir RUN/tensorboard``, ``trackio show``,
``wandb sync RUN/wandb/offline-run-*``, ``mlflow ui --backend-store-uri RUN/mlruns``); nothing is sent anywhere.

Steps carry scalars (loss, learning rate, eval accuracy); a run's tables (results, paired comparisons) are logged
once at its end; the config once at its start.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Sequence
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path

from harness.errors import UserError
from harness.quiet import verbose

# each tracker and what it writes under the run directory (wandb names its own folder in the directory it is given)
WRITES = {"tensorboard": "tensorboard", "trackio": "trackio", "wandb": "wandb", "mlflow": "mlruns"}
TRACKERS = tuple(WRITES)


def tracker_list(text: str) -> list[str]:
    """argparse type: trackers by name, comma-separated ("none": no tracker)."""
    import argparse

    names = [name.strip() for name in text.split(",") if name.strip()]
    if names == ["none"]:
        return []
    unknown = [name for name in names if name not in TRACKERS]
    if unknown or not names:
        said = ", ".join(unknown) or repr(text)
        raise argparse.ArgumentTypeError(f"unknown tracker {said}; known: {', '.join(TRACKERS)}")
    for name in names:  # before any work: harness.eval logs only once its grid is done
        _check_installed(name)
    return list(dict.fromkeys(names))


def add_report_to_flag(parser) -> None:
    """--report-to, as harness.eval, finetune.train and scratch.train take it."""
    parser.add_argument(
        "--report-to", type=tracker_list, default=[], help=f"trackers, offline under --out: {', '.join(TRACKERS)}"
    )


def check_folders(names: Sequence[str], directory: Path) -> None:
    """Where each tracker writes under the run directory must be a folder or nothing: checked before any work (a
    file there would stop harness.eval's logging after the whole grid ran)."""
    for name in names:
        path = Path(directory) / WRITES[name]
        if path.exists() and not path.is_dir():
            raise UserError(
                f"{path} is a file where --report-to {name} writes its folder; move it, or choose another --out"
            )


@contextmanager
def said_only_if_verbose():
    """A tracker's own prints (banners, dashboard hints) kept off numprec's console unless --verbose."""
    if verbose():
        yield
        return
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        yield


def _check_installed(name: str) -> None:
    import importlib.util

    if importlib.util.find_spec(name) is None:  # each tracker's package has its name
        raise UserError(f"--report-to {name} needs {name}; run: pip install {name}")


def _require(name: str):
    import importlib

    _check_installed(name)
    return importlib.import_module(name)


class Trackers:
    """The chosen trackers of one run, writing under ``directory``."""

    def __init__(self, names: Sequence[str], directory: Path, run_name: str, config: dict | None = None):
        self.names = list(names)
        check_folders(self.names, directory)
        self._open: dict[str, object] = {}
        config = json.loads(json.dumps(config or {}, default=str))
        if "tensorboard" in self.names:
            _require("tensorboard")
            from torch.utils.tensorboard import SummaryWriter

            writer = SummaryWriter(log_dir=str(directory / WRITES["tensorboard"]))
            writer.add_text("config", "```\n" + json.dumps(config, indent=2) + "\n```")
            self._open["tensorboard"] = writer
        if "trackio" in self.names:
            os.environ.setdefault("TRACKIO_DIR", str(directory / WRITES["trackio"]))  # read when trackio is imported
            trackio = _require("trackio")
            with said_only_if_verbose():  # its banner and dashboard hints
                trackio.init(project="numprec", name=run_name, config=config, auto_log_gpu=False)
            self._open["trackio"] = trackio
        if "wandb" in self.names:
            wandb = _require("wandb")
            self._open["wandb"] = wandb.init(
                project="numprec", name=run_name, config=config, dir=str(directory), mode="offline"
            )
        if "mlflow" in self.names:
            mlflow = _require("mlflow")
            mlflow.set_tracking_uri((directory / WRITES["mlflow"]).resolve().as_uri())
            mlflow.start_run(run_name=run_name)
            mlflow.log_params({k: str(v)[:500] for k, v in config.items()})
            self._open["mlflow"] = mlflow

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Scalars at a step (non-numbers are left out)."""
        scalars = {k: float(v) for k, v in metrics.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        for name, tracker in self._open.items():
            if name == "tensorboard":
                for key, value in scalars.items():
                    tracker.add_scalar(key, value, step)
            elif name == "trackio" or name == "wandb":
                tracker.log(scalars, step=step)
            elif name == "mlflow":
                tracker.log_metrics(scalars, step=step)

    def table(self, key: str, rows: Sequence[dict]) -> None:
        """A table (results, paired comparisons), once."""
        if not rows:
            return
        columns = list(rows[0])
        for name, tracker in self._open.items():
            if name == "tensorboard":
                lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
                lines += ["| " + " | ".join(str(row[c]) for c in columns) + " |" for row in rows]
                tracker.add_text(key, "\n".join(lines))
            elif name == "trackio":
                tracker.log({key: tracker.Table(columns=columns, data=[[row[c] for c in columns] for row in rows])})
            elif name == "wandb":
                import wandb

                tracker.log({key: wandb.Table(columns=columns, data=[[row[c] for c in columns] for row in rows])})
            elif name == "mlflow":
                tracker.log_table({c: [row[c] for row in rows] for c in columns}, artifact_file=f"{key}.json")

    def close(self) -> None:
        for name, tracker in self._open.items():
            if name == "tensorboard":
                tracker.close()
            elif name in ("trackio", "wandb"):
                with said_only_if_verbose():
                    tracker.finish()
            elif name == "mlflow":
                tracker.end_run()
        self._open.clear()
