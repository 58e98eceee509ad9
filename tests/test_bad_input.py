"""Every command meets bad input with one line on stderr and exit status 2: no traceback, nothing started,
nothing written (issue 14's matrix: ranges, upper bounds, zero, duplicates, typos, abbreviations, non-UTF-8
files and paths, unwritable outputs, broken model and adapter directories, empty configs).

The matrix calls each command's main() in this process through harness.core.cli.run, as ``python -m`` does, so ~180
cases take seconds; a few of them also run as real processes to show the process-level contract."""

from __future__ import annotations

import importlib
import json
import os
import signal

import pytest

from harness.core.cli import run
from harness.reports.destinations import RUN_FILES
from harness.runs.results import COLUMNS
from tests.bad_input.runs import (
    EVAL,
    FINETUNE_DATA,
    FINETUNE_TRAIN,
    OK_SWEEP,
    PROBLEMS,
    SCRATCH_SWEEP,
    SCRATCH_TRAIN,
)
from tests.bad_input.tools import BENCH, CURVE, DIFF, EXPORT, QUANTIZE, REPORT, RESCORE, SERVE, TASKS, VIEW
from tests.harness.helpers import ROOT, assert_user_error, run_module

MATRIX = {
    "harness.eval": EVAL,
    "harness.diff": DIFF,
    "harness.rescore": RESCORE,
    "harness.problems": PROBLEMS,
    "finetune.data": FINETUNE_DATA,
    "finetune.train": FINETUNE_TRAIN,
    "scratch.train": SCRATCH_TRAIN,
    "scratch.sweep": SCRATCH_SWEEP,
    "harness.quantize": QUANTIZE,
    "bench.run": BENCH,
    "harness.serve": SERVE,
    "finetune.curve": CURVE,
    "harness.view": VIEW,
    "harness.report": REPORT,
    "harness.export": EXPORT,
    "harness.tasks": TASKS,
}


def cases():
    """(module, argv, fragment, file) for every row; ``file`` is a (name, content) to write first, or None."""
    for module, rows in MATRIX.items():
        for row in rows:
            values, marks = (row.values, row.marks) if hasattr(row, "values") else (row, ())
            name, argv, fragment, *file = values
            yield pytest.param(module, argv, fragment, file[0] if file else None, id=f"{module}:{name}", marks=marks)


def test_the_matrix_covers_every_command():
    assert sum(len(rows) for rows in MATRIX.values()) >= 80
    assert all(len(rows) >= 10 for rows in MATRIX.values())


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """Inputs of every kind the cases point at, in the current directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_file").write_text("not a directory\n")
    (tmp_path / "empty_dir").mkdir()
    models = {
        "broken_model": b"{not json",
        "list_model": b"[]",
        "latin1_model": b'{"model_type": "caf\xe9"}',
        "typeless_model": b'{"hidden_size": 8}',
        "model_dir": b'{"model_type": "llama"}',
    }
    for name, content in models.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_bytes(content)
    adapters = {
        "broken_adapter": "{",
        "typeless_adapter": json.dumps({"r": 8}),
        "weightless_adapter": json.dumps({"peft_type": "LORA", "r": 8}),
    }
    for name, content in adapters.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "adapter_config.json").write_text(content)
    make_damaged_inputs(tmp_path)
    return tmp_path


def make_damaged_inputs(root) -> None:
    """Weights, adapters, datasets, checkpoints and run directories damaged in each way the matrix names."""
    make_damaged_models(root)
    make_damaged_checkpoints(root)
    make_damaged_runs(root)


def make_damaged_models(root) -> None:
    """Weights and adapters: empty, corrupt, of an unknown kind, shaped for another model."""
    import torch
    from safetensors.torch import save_file

    llama = json.dumps({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4})
    weights = {
        "empty_weights": {"model.safetensors": b""},
        "corrupt_weights": {"model.safetensors": b"\x10\x00\x00\x00\x00\x00\x00\x00{not a header}"},
        "mapless_index": {"model.safetensors.index.json": b"{}"},
        "shardless_index": {"model.safetensors.index.json": b'{"weight_map": {"a": "gone.safetensors"}}'},
    }
    for name, files in weights.items():
        (root / name).mkdir()
        (root / name / "config.json").write_text(llama)
        for file, content in files.items():
            (root / name / file).write_bytes(content)
    odd = {
        "alien_model": {"model_type": "frobnicator"},
        "odd_quant_model": {"model_type": "llama", "quantization_config": [4]},
    }
    for name, config_json in odd.items():
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps(config_json))
        save_file({"w": torch.zeros(1)}, str(root / name / "model.safetensors"))
    lora = {"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj"]}
    foreign = {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": torch.zeros(8, 77)}
    adapters = {
        "alien_adapter": ({**lora, "peft_type": "SPELLS"}, None),
        "rankless_adapter": ({**lora, "r": "eight"}, None),
        "corrupt_adapter": (lora, b"garbage"),
        "foreign_adapter": (lora, foreign),
    }
    for name, (config_json, tensors) in adapters.items():
        (root / name).mkdir()
        (root / name / "adapter_config.json").write_text(json.dumps(config_json))
        target = root / name / "adapter_model.safetensors"
        if isinstance(tensors, bytes):
            target.write_bytes(tensors)
        else:
            save_file(tensors or {"x": torch.zeros(1)}, str(target))
    (root / "fake.gguf").write_bytes(b"GGUF\x03\x00\x00")


def make_damaged_checkpoints(root) -> None:
    """A dataset without its columns and from-scratch checkpoints empty, corrupt, foreign or of another task."""
    from dataclasses import asdict, replace

    import torch

    from scratch.config import RunConfig

    (root / "columnless_data").mkdir()
    (root / "columnless_data" / "dataset_info.json").write_text(json.dumps({"features": {"prompt": {}}}))
    for name in ("ckpt_empty", "ckpt_corrupt", "ckpt_dir", "ckpt_foreign", "ckpt_mul"):
        (root / name).mkdir()
    (root / "ckpt_empty" / "checkpoint.pt").write_bytes(b"")
    (root / "ckpt_corrupt" / "checkpoint.pt").write_bytes(b"PK\x03\x04 not a torch file")
    (root / "ckpt_dir" / "checkpoint.pt").mkdir()
    torch.save({"weights": 1}, root / "ckpt_foreign" / "checkpoint.pt")
    other = asdict(replace(RunConfig(), op="mul", steps=10, warmup_steps=1))
    state = {"model": {}, "optimizer": {}, "step": 1, "history": [], "data_rng": torch.zeros(1), "config": other}
    torch.save(state, root / "ckpt_mul" / "checkpoint.pt")


def make_damaged_runs(root) -> None:
    """Run, bench and sweep directories whose files are missing, folders, undecodable or someone else's."""
    identity = json.dumps({"identity": {"samples": 2, "seed": 0, "decoding": "greedy"}, "invocations": []})
    runs = {
        "run_results_dir": {"results.csv/": None},
        "run_results_dir_rescore": {"results.csv/": None, "run.json": identity},
        "run_samples_dir": {"samples.jsonl/": None, "run.json": identity, "results.csv": "model\n"},
        "run_summary_dir": {"summary.md/": None},
        "run_json_list": {"run.json": "[]", "results.csv": "model\n"},
        "run_json_string": {"run.json": '"a run"'},
        "run_json_invalid": {"run.json": "{"},
        "run_json_latin1": {"run.json": b'{"identity": "caf\xe9"}', "results.csv": "model\n"},
        "run_json_nested": {"run.json": "[" * 100_000 + "]" * 100_000, "results.csv": "model\n"},
        "run_json_dir": {"run.json/": None},
        "run_no_identity": {"run.json": "{}", "results.csv": "model\n"},
        "run_csv_latin1": {"results.csv": b"model\ncaf\xe9\n", "run.json": identity},
        "run_csv_huge": {"results.csv": ",".join(COLUMNS) + '\n"' + "x" * 200_000 + '"\n', "run.json": identity},
        "run_csv_foreign": {"results.csv": "name,score\nme,1\n"},
    }
    runs["bench_results_dir"] = {"results.json/": None}
    runs["parquet_dir"] = {"results.parquet/": None}
    reference = {name: (ROOT / "reports" / "quick-greedy-n40-seed0" / name).read_bytes() for name in RUN_FILES}
    record = json.loads(reference["run.json"])
    runs["run_invocations_string"] = {**reference, "run.json": json.dumps({**record, "invocations": "a run"})}
    samples_kept = b"".join(
        line for line in reference["samples.jsonl"].splitlines(keepends=True) if b'"length": 3' not in line
    )
    runs["run_rows_without_samples"] = {**reference, "samples.jsonl": samples_kept}
    snapshot = root / "ft_run" / "curve" / "samples-8"
    snapshot.mkdir(parents=True)
    (snapshot / "adapter_model.safetensors").write_bytes(b"")
    (root / "ft_run" / "adapter").mkdir()
    runs["sweep_foreign"] = {"results.csv": "name,score\nme,1\n"}
    runs["sweep_latin1"] = {"results.csv": b"task,operands\ncaf\xe9\n"}
    runs["sweep_dir"] = {"results.csv/": None}
    (root / "sweep.yaml").write_text(OK_SWEEP)
    for name, files in runs.items():
        (root / name).mkdir()
        for file, content in files.items():
            if file.endswith("/"):
                (root / name / file).mkdir()
            else:
                data = content if isinstance(content, bytes) else content.encode()
                (root / name / file).write_bytes(data)


def files_under(root) -> set:
    return {path.relative_to(root) for path in root.rglob("*")}


class StartedWork(Exception):
    """The command was still running after the bad input: it had started work instead of refusing."""


@pytest.mark.parametrize("module,argv,fragment,file", list(cases()))
def test_bad_input_is_one_line_exit_2_and_nothing_written(module, argv, fragment, file, workdir, capsys):
    if file:
        name, content = file
        (workdir / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    before = files_under(workdir)
    main = importlib.import_module(module).main

    def started(signum, frame):
        raise StartedWork(f"{module} {argv} was still running after 60 s")

    previous = signal.signal(signal.SIGALRM, started)
    signal.alarm(60)
    try:
        with pytest.raises(SystemExit) as exit_info:
            run(main, [arg.replace("{config}", "config.yaml") for arg in argv])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert exit_info.value.code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert fragment in lines[0], lines[0]
    assert files_under(workdir) == before, "a refused command writes nothing"


@pytest.mark.parametrize(
    "module,argv,fragment",
    [
        ("harness.eval", ["--samples", "0"], "--samples: must be at least 1"),
        ("harness.eval", ["--model", "gpt-7"], "unknown model 'gpt-7'"),
        ("scratch.train", ["--n-head", "3"], "must divide n_embd"),
        ("finetune.data", ["--scale", "0"], "--scale: must be greater than 0"),
        ("bench.run", ["--out", "b", "--only", "eval,eval"], "lists eval twice"),
    ],
)
def test_the_real_process_prints_one_line_and_exits_2(module, argv, fragment, tmp_path):
    assert_user_error(run_module(module, *argv, cwd=tmp_path), fragment)
    assert not list(tmp_path.iterdir())


def test_an_unwritable_directory_is_refused_before_work(tmp_path, workdir, capsys):
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere; the path-under-a-file cases cover this as root")
    locked = workdir / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(SystemExit) as exit_info:
        run(importlib.import_module("harness.eval").main, ["--out", str(locked / "run")])
    assert exit_info.value.code == 2
    assert "permission denied" in capsys.readouterr().err


def test_serve_on_a_port_in_use_is_one_line(capsys):
    """uvicorn would say "ERROR: [Errno 98] ..." in its own words and exit 3, after the model loaded."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SystemExit) as exit_info:
            run(importlib.import_module("harness.serve").main, ["--port", str(port)])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exit_info.value.code == 2 and lines == [f"error: port {port} on 127.0.0.1 is in use; pass another --port"]


@pytest.mark.parametrize("value", ["often", "²", "٣"])
def test_a_bad_read_every_is_one_line_before_any_work(value, tmp_path):
    """NUMPREC_READ_EVERY (how often the GPU decode path reads the device) is read when the backend starts: ASCII
    digits only (Python's isdigit takes a superscript two, int() an Arabic-Indic three)."""
    result = run_module(
        "harness.eval", "--tasks", "add", "--lengths", "1", "--samples", "2", "--precision", "fp32",
        "--out", str(tmp_path / "run"), env={"NUMPREC_READ_EVERY": value},
    )  # fmt: skip
    assert_user_error(result, f"NUMPREC_READ_EVERY={value!r}: give a whole number of decode steps, at least 1")
    assert not (tmp_path / "run").exists()


def test_a_bf16_kernel_of_no_name_is_one_line_before_any_work(tmp_path):
    """NUMPREC_BF16_GEMM (torch's bf16 kernel or float32's GEMM over the bf16 values: harness/backends/widened_bf16.py)
    is checked with the plan, before the model is loaded."""
    result = run_module(
        "harness.eval", "--tasks", "add", "--lengths", "1", "--samples", "2", "--precision", "bf16",
        "--out", str(tmp_path / "run"), env={"NUMPREC_BF16_GEMM": "fp32"},
    )  # fmt: skip
    assert_user_error(result, "NUMPREC_BF16_GEMM='fp32' names no bf16 kernel; use one of native, float32")
    assert not (tmp_path / "run").exists()


def test_a_junk_awq_kernel_is_named_before_the_checkpoint_is_looked_at(tmp_path):
    """Settings are checked in plan order: NUMPREC_AWQ_KERNEL, a name of no kernel, is the one line even where the
    AWQ checkpoint it would load is not there either."""
    result = run_module(
        "harness.eval", "--precision", "awq-w4", "--model-path", str(tmp_path), "--tasks", "add", "--lengths", "1",
        "--samples", "2", "--out", str(tmp_path / "run"), env={"NUMPREC_AWQ_KERNEL": "exllama"},
    )  # fmt: skip
    assert_user_error(result, "NUMPREC_AWQ_KERNEL=exllama names no AWQ kernel")
    assert not (tmp_path / "run").exists()
