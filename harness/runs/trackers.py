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

from harness.core.errors import UserError
from harness.core.quiet import verbose

# Each tracker is a class registered where it is defined (@tracker below): its name, and the folder it writes under
# the run directory (wandb names its own folder in the directory it is given).
TRACKER_CLASSES: dict[str, type[Tracker]] = {}


def tracker(name: str, folder: str):
    """Register a Tracker class as ``--report-to name``, writing ``folder`` under the run directory."""

    def register(cls: type[Tracker]) -> type[Tracker]:
        cls.name, cls.folder = name, folder
        TRACKER_CLASSES[name] = cls
        return cls

    return register


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


class Tracker:
    """One tracker of a run, opened on its folder: scalars at a step, a table once, closed at the end."""

    name = folder = ""

    def __init__(self, directory: Path, run_name: str, config: dict):
        raise NotImplementedError

    def log(self, scalars: dict[str, float], step: int) -> None:
        raise NotImplementedError

    def table(self, key: str, columns: list[str], rows: Sequence[dict]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


@tracker("tensorboard", "tensorboard")
class TensorBoard(Tracker):
    def __init__(self, directory: Path, run_name: str, config: dict):
        _require("tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(directory / self.folder))
        self.writer.add_text("config", "```\n" + json.dumps(config, indent=2) + "\n```")

    def log(self, scalars: dict[str, float], step: int) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, step)

    def table(self, key: str, columns: list[str], rows: Sequence[dict]) -> None:
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(str(row[c]) for c in columns) + " |" for row in rows]
        self.writer.add_text(key, "\n".join(lines))

    def close(self) -> None:
        self.writer.close()


@tracker("trackio", "trackio")
class Trackio(Tracker):
    def __init__(self, directory: Path, run_name: str, config: dict):
        os.environ.setdefault("TRACKIO_DIR", str(directory / self.folder))  # read when trackio is imported
        self.trackio = _require("trackio")
        with said_only_if_verbose():  # its banner and dashboard hints
            self.trackio.init(project="numprec", name=run_name, config=config, auto_log_gpu=False)

    def log(self, scalars: dict[str, float], step: int) -> None:
        self.trackio.log(scalars, step=step)

    def table(self, key: str, columns: list[str], rows: Sequence[dict]) -> None:
        data = [[row[c] for c in columns] for row in rows]
        self.trackio.log({key: self.trackio.Table(columns=columns, data=data)})

    def close(self) -> None:
        with said_only_if_verbose():
            self.trackio.finish()


@tracker("wandb", "wandb")
class WandB(Tracker):
    def __init__(self, directory: Path, run_name: str, config: dict):
        self.wandb = _require("wandb")
        self.run = self.wandb.init(project="numprec", name=run_name, config=config, dir=str(directory), mode="offline")

    def log(self, scalars: dict[str, float], step: int) -> None:
        self.run.log(scalars, step=step)

    def table(self, key: str, columns: list[str], rows: Sequence[dict]) -> None:
        self.run.log({key: self.wandb.Table(columns=columns, data=[[row[c] for c in columns] for row in rows])})

    def close(self) -> None:
        with said_only_if_verbose():
            self.run.finish()


@tracker("mlflow", "mlruns")
class MLflow(Tracker):
    def __init__(self, directory: Path, run_name: str, config: dict):
        self.mlflow = _require("mlflow")
        self.mlflow.set_tracking_uri((directory / self.folder).resolve().as_uri())
        self.mlflow.start_run(run_name=run_name)
        self.mlflow.log_params({k: str(v)[:500] for k, v in config.items()})

    def log(self, scalars: dict[str, float], step: int) -> None:
        self.mlflow.log_metrics(scalars, step=step)

    def table(self, key: str, columns: list[str], rows: Sequence[dict]) -> None:
        self.mlflow.log_table({c: [row[c] for row in rows] for c in columns}, artifact_file=f"{key}.json")

    def close(self) -> None:
        self.mlflow.end_run()


# what each tracker writes under the run directory, and the trackers by name, in the order they are defined
WRITES = {name: cls.folder for name, cls in TRACKER_CLASSES.items()}
TRACKERS = tuple(WRITES)


class Trackers:
    """The chosen trackers of one run, writing under ``directory``."""

    def __init__(self, names: Sequence[str], directory: Path, run_name: str, config: dict | None = None):
        self.names = list(names)
        check_folders(self.names, directory)
        config = json.loads(json.dumps(config or {}, default=str))
        self._open: dict[str, Tracker] = {}
        for name in self.names:
            self._open[name] = TRACKER_CLASSES[name](Path(directory), run_name, config)

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Scalars at a step (non-numbers are left out)."""
        scalars = {k: float(v) for k, v in metrics.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        for opened in self._open.values():
            opened.log(scalars, step)

    def table(self, key: str, rows: Sequence[dict]) -> None:
        """A table (results, paired comparisons), once."""
        if not rows:
            return
        for opened in self._open.values():
            opened.table(key, list(rows[0]), rows)

    def close(self) -> None:
        for opened in self._open.values():
            opened.close()
        self._open.clear()
