"""Bad input to the commands around the runs: harness.quantize, bench.run, harness.diff, harness.rescore,
harness.serve, and the readers of finished runs (harness.view, harness.report, harness.export, harness.tasks,
finetune.curve). The files and directories the rows name are made by tests/test_bad_input.py's workdir fixture."""

from __future__ import annotations

import pytest

from tests.devices import without_cuda
from tests.harness.helpers import ROOT

RECIPE_GPTQ = """
quant_stage:
  quant_modifiers:
    GPTQModifier:
      ignore: [lm_head]
      config_groups: {group_0: {targets: [Linear], weights: {num_bits: 4, type: int, strategy: group, group_size: 64}}}
"""
SPINQUANT = "    SpinQuantModifier: {rotations: [R1, R2]}\n    GPTQModifier:"
RECIPE_SPINQUANT = RECIPE_GPTQ.replace("    GPTQModifier:", SPINQUANT)


def recipe(name: str, text: str, fragment: str, *more: str) -> tuple:
    """harness.quantize --recipe of ``text``."""
    return (name, ["--recipe", "{config}", "--out", "q", *more], fragment, ("config.yaml", text))


QUANTIZE = [
    ("hub-weights-absent", ["--model", "llama-int4", "--method", "awq", "--out", "q"], "are not on this machine"),
    ("group-0", ["--method", "gptq", "--group-size", "0"], "--group-size: must be at least 8"),
    ("group-negative", ["--method", "gptq", "--group-size", "-1"], "must be at least 8"),
    ("group-huge", ["--method", "gptq", "--group-size", "100000"], "at most 4,096"),
    ("group-does-not-tile", ["--method", "gptq", "--group-size", "100"], "does not divide"),
    ("bits-3", ["--method", "gptq", "--bits", "3"], "stores 4"),
    ("samples-0", ["--method", "gptq", "--samples", "0"], "--samples: must be at least 1"),
    ("samples-huge", ["--method", "gptq", "--samples", str(10**7)], "calibrate on 128-512"),
    ("seed-negative", ["--method", "gptq", "--seed", "-1"], "--seed: must be at least 0"),
    ("method-unknown", ["--method", "hqq"], "invalid choice: 'hqq'"),
    ("model-unknown", ["--method", "gptq", "--model", "gpt-7"], "unknown model 'gpt-7'"),
    ("format-mismatch", ["--method", "gptq", "--format", "autoawq"], "--format autoawq holds AWQ"),
    ("out-a-file", ["--method", "gptq", "--out", "a_file"], "is a file"),
    ("abbreviated", ["--meth", "gptq"], "--meth is not a flag; write it in full"),
    ("out-empty", ["--method", "gptq", "--out", ""], "an empty path"),
    ("model-path-no-out", ["--method", "gptq", "--model-path", "empty_dir"], "--model-path needs --out DIR"),
    ("model-path-missing", ["--method", "gptq", "--model-path", "gone", "--out", "q"], "gone does not exist"),
    ("model-path-no-config", ["--method", "gptq", "--model-path", "empty_dir", "--out", "q"], "no config.json"),
    # the checkpoint replaces its directory whole: never the working directory, nor a directory of other files
    ("out-here", ["--method", "awq", "--out", "."], "is the working directory"),
    ("out-above", ["--method", "awq", "--out", ".."], "is the working directory (or holds it)"),
    ("out-not-a-checkpoint", ["--method", "gptq", "--out", "model_dir"], "not a checkpoint harness.quantize wrote"),
    # the rounding method: one the format takes (and which do), named once
    ("rounding-unsupported", ["--precision", "nvfp4-a16", "--rounding", "autoround"], "nvfp4-a16+gptq, nvfp4-a16+awq"),
    ("rounding-unsupported-named", ["--precision", "fp8-block+autoround"], "cannot be rounded by autoround"),
    ("rounding-twice", ["--precision", "nvfp4+gptq", "--rounding", "awq"], "names its rounding already"),
    ("rounding-with-method", ["--method", "gptq", "--rounding", "awq"], "is its rounding already"),
    ("rounding-unknown", ["--precision", "nvfp4", "--rounding", "hqq"], "invalid choice: 'hqq'"),
    ("rounding-of-a-cast", ["--precision", "bf16+gptq"], "bf16 is rounded by rtn only"),
    recipe("recipe-unread-modifier", RECIPE_SPINQUANT, "not SpinQuantModifier + GPTQModifier"),
    recipe("recipe-no-groups", "s:\n  m_modifiers:\n    GPTQModifier: {ignore: [lm_head]}\n", "gives no config groups"),
    recipe("recipe-not-yaml", "quant_stage: [\n", "not an llm-compressor recipe numprec reads"),
    recipe(
        "recipe-and-rounding",
        RECIPE_GPTQ,
        "leave out --bits, --group-size, --format and --rounding",
        "--rounding",
        "awq",
    ),  # fmt: skip
]

BENCH = [
    ("problems-0", ["--out", "b", "--problems", "0"], "--problems: must be at least 1"),
    ("problems-huge", ["--out", "b", "--problems", str(10**7)], "at most 100,000"),
    ("repeats-0", ["--out", "b", "--repeats", "0"], "--repeats: must be at least 1"),
    ("repeats-huge", ["--out", "b", "--repeats", "1000"], "at most 100"),
    ("threads-0", ["--out", "b", "--threads", "0"], "--threads: must be at least 1"),
    ("threads-huge", ["--out", "b", "--threads", "1000000"], "oversubscribed threads only slow a run"),
    ("batch-0", ["--out", "b", "--batch-size", "0"], "--batch-size: must be at least 1"),
    ("section-unknown", ["--out", "b", "--only", "speed"], "unknown section"),
    ("section-repeated", ["--out", "b", "--only", "eval,eval"], "lists eval twice"),
    ("quick-not-train", ["--out", "b", "--only", "rundir", "--quick"], "--quick shortens the train section only"),
    ("out-a-file", ["--out", "a_file"], "is a file"),
    ("out-missing", ["--problems", "5"], "required: --out"),
    ("abbreviated", ["--out", "b", "--prob", "5"], "--prob is not a flag; write it in full"),
    ("device-unknown", ["--out", "b", "--device", "gpu"], "unknown device 'gpu'"),
    pytest.param("device-cuda", ["--out", "b", "--device", "cuda"], "needs a CUDA GPU", marks=without_cuda),
    ("out-empty", ["--out", ""], "an empty path"),
    # an earlier run's results.json in --out, whose sections a run keeps: damaged, it is refused, never written over
    ("results-not-json", ["--out", "empty_dir"], "is not valid JSON", ("empty_dir/results.json", "{\n")),
    ("results-a-list", ["--out", "empty_dir"], "must hold a JSON object, got list", ("empty_dir/results.json", "[]")),
    ("results-no-runs", ["--out", "empty_dir"], "its 'runs' is not a list", ("empty_dir/results.json", '{"runs": 5}')),
    ("results-not-utf8", ["--out", "empty_dir"], "is not UTF-8 text", ("empty_dir/results.json", b'{"a": "\xe9"}')),
    ("results-a-directory", ["--out", "bench_results_dir"], "cannot read bench_results_dir/results.json"),
    (
        "results-section",
        ["--out", "empty_dir"],
        "section 'data' is not a list",
        ("empty_dir/results.json", '{"command": "x", "data": 1}'),
    ),
]


def samples(content: str | bytes) -> tuple:
    return ("empty_dir/samples.jsonl", content)


GOOD_SAMPLE = (
    '{"model": "m", "precision": "fp32", "adapter": "", "task": "add", "operands": 2, "truncate": "", "base": 10, '
    '"length": 1, "index": 0, "expression": "1 + 1", "prompt": "1 + 1", "output": "2", "extracted": "2", '
    '"rule": "bare", "gold": "2", "correct": true}\n'
)
DIFF = [
    ("missing-first", ["gone", "empty_dir"], "gone does not exist"),
    ("missing-second", ["empty_dir", "gone"], "gone does not exist"),
    ("not-a-run", ["empty_dir", "empty_dir"], "empty_dir has no samples.jsonl"),
    ("a-file", ["a_file", "empty_dir"], "a_file has no samples.jsonl"),
    ("one-run", ["empty_dir"], "required: second"),
    ("no-runs", [], "required: first, second"),
    ("three-runs", ["empty_dir", "empty_dir", "empty_dir"], "unrecognized arguments"),
    ("not-json", ["empty_dir", "empty_dir"], "samples.jsonl line 2: not a JSON sample", samples(GOOD_SAMPLE + "{\n")),
    ("not-utf8", ["empty_dir", "empty_dir"], "line 1: not UTF-8 text", samples(b'{"output": "\xff"}\n')),
    ("no-index", ["empty_dir", "empty_dir"], "line 1: no 'index'", samples(GOOD_SAMPLE.replace('"index": 0, ', ""))),
    ("no-output", ["empty_dir", "empty_dir"], "no 'output'", samples(GOOD_SAMPLE.replace('"output": "2",', ""))),
    ("a-list", ["empty_dir", "empty_dir"], "line 1: not a JSON sample", samples("[1, 2]\n")),
    ("abbreviated", ["--he"], "--he is not a flag"),
]

RESCORE = [
    ("not-a-run", ["empty_dir"], "is not a harness.eval run directory"),
    ("missing", ["gone"], "gone does not exist"),
    ("no-run", [], "required: run"),
    ("abbreviated", ["--he"], "--he is not a flag"),
    ("run-json-a-list", ["run_json_list"], "must hold a JSON object"),
    ("run-json-not-utf8", ["run_json_latin1"], "is not UTF-8 text"),
    ("run-json-nested", ["run_json_nested"], "nests deeper than any file"),
    ("run-json-no-identity", ["run_no_identity"], "has no identity"),
    ("results-a-directory", ["run_results_dir_rescore"], "is not a harness.eval run directory"),
    ("samples-a-directory", ["run_samples_dir"], "samples.jsonl is not a regular file"),
    ("csv-huge-field", ["run_csv_huge"], "field larger than field limit"),
    ("csv-not-utf8", ["run_csv_latin1"], "results.csv is not UTF-8 text"),
]

SERVE = [
    ("port-0", ["--port", "0"], "--port: must be at least 1"),
    ("port-huge", ["--port", "70000"], "TCP ports end there"),
    ("host-unresolvable", ["--host", "no-such-host.invalid"], "no address or host name this machine can resolve"),
    ("host-not-local", ["--host", "192.0.2.1"], "is not an address of this machine"),  # TEST-NET-1: never routed
    ("key-on-the-command-line", ["--api-key", "sesame"], "would put the key in the process list"),
    ("key-on-the-command-line-equals", ["--api-key=sesame"], "NUMPREC_API_KEY or pass --api-key-file"),
    ("key-file-missing", ["--api-key-file", "gone.key"], "gone.key does not exist"),
    ("key-file-empty", ["--api-key-file", "a_file"], "must hold the key alone"),
    ("not-gguf", ["--precision", "fp32"], "serves GGUF files"),
    ("no-gguf-of-the-model", ["--model", "llama-bf16", "--precision", "gguf-q4_1"], "does not run at gguf-q4_1"),
    ("model-unknown", ["--model", "gpt-7"], "unknown model 'gpt-7'"),
]


REFERENCE_RUN = str(ROOT / "reports" / "quick-greedy-n40-seed0")


def run_readers(out: str, *, several: bool) -> list[tuple]:
    """The rows every command that reads finished runs shares (harness/runs/stored.py), --out being ``out``."""
    return [
        ("missing", ["gone", "--out", out], "gone does not exist"),
        ("not-a-run", ["empty_dir", "--out", out], "empty_dir has no results.csv"),
        ("a-file", ["a_file", "--out", out], "a_file has no results.csv"),
        ("results-not-utf8", ["run_csv_latin1", "--out", out], "results.csv is not UTF-8 text; it was not written"),
        ("results-foreign", ["run_csv_foreign", "--out", out], "is not a numprec results file"),
        ("results-huge-field", ["run_csv_huge", "--out", out], "field larger than field limit"),
        ("no-out", [REFERENCE_RUN], "required: --out"),
        ("no-run", ["--out", out], "required: runs" if several else "required: run"),
        ("abbreviated", [REFERENCE_RUN, "--ou", out], "--ou is not a flag; write it in full: --out"),
        (
            ("twice", [REFERENCE_RUN, REFERENCE_RUN, "--out", out], "a run is given twice")
            if several
            else ("two-runs", [REFERENCE_RUN, REFERENCE_RUN, "--out", out], "unrecognized arguments")
        ),
    ]


VIEW = [
    *run_readers("page.html", several=True),
    ("out-the-runs-file", [REFERENCE_RUN, "--out", REFERENCE_RUN + "/results.csv"], "is inside the run"),
    ("out-inside-another-run", [REFERENCE_RUN, "--out", "run_csv_latin1/page.html"], "lies inside the run directory"),
    ("out-a-users-file", [REFERENCE_RUN, "--out", "a_file"], "a_file exists and was not written by"),
    ("invocations-a-string", ["run_invocations_string", "--out", "page.html"], "is damaged (invocations is a str"),
    ("a-row-without-samples", ["run_rows_without_samples", "--out", "page.html"], "python -m harness.eval"),
    ("out-a-directory", [REFERENCE_RUN, "--out", "empty_dir"], "empty_dir is a directory; give a file name inside it"),
    ("out-unwritable", [REFERENCE_RUN, "--out", "/proc/page.html"], "cannot write /proc/page.html"),
]
REPORT = [
    *run_readers("merged", several=True),
    ("out-a-file", [REFERENCE_RUN, "--out", "a_file"], "a_file is a file, not a directory"),
    ("out-holds-a-run", [REFERENCE_RUN, "--out", "run_csv_latin1"], "already holds a run (results.csv, run.json)"),
    ("out-inside-an-input", [REFERENCE_RUN, "--out", REFERENCE_RUN + "/merged"], "is inside the run"),
    ("out-holds-users-files", [REFERENCE_RUN, "--out", "model_dir"], "files python -m harness.report did not write"),
    ("invocations-a-string", ["run_invocations_string", "--out", "merged"], "is damaged (invocations is a str"),
    ("out-unwritable", [REFERENCE_RUN, "--out", "/proc/merged"], "cannot use /proc/merged as an output directory"),
]
EXPORT = [
    *run_readers("dataset", several=False),
    ("out-the-run", [REFERENCE_RUN, "--out", REFERENCE_RUN], "is the run"),
    ("out-another-run", [REFERENCE_RUN, "--out", "run_csv_latin1"], "already holds a run"),
    ("out-holds-users-files", [REFERENCE_RUN, "--out", "model_dir"], "did not write (config.json)"),
    ("out-parquet-a-directory", [REFERENCE_RUN, "--out", "parquet_dir"], "(results.parquet/)"),
    ("invocations-a-string", ["run_invocations_string", "--out", "dataset"], "is damaged (invocations is a str"),
    ("unfinished", ["run_rows_without_samples", "--out", "dataset"], "python -m harness.eval"),
    ("out-a-file", [REFERENCE_RUN, "--out", "a_file"], "a_file is a file, not a directory"),
    ("out-unwritable", [REFERENCE_RUN, "--out", "/proc/dataset"], "cannot use /proc/dataset as an output directory"),
]


LM_EVAL = ["--harness", "lm-eval", "--out", "tasks"]
TASKS = [
    ("no-harness", ["--out", "tasks"], "required: --harness"),
    ("harness-unknown", ["--harness", "lighteval", "--out", "tasks"], "invalid choice: 'lighteval'"),
    ("no-out", ["--harness", "lm-eval"], "required: --out"),
    ("out-a-file", ["--harness", "lm-eval", "--out", "a_file"], "a_file is a file, not a directory"),
    ("out-unwritable", ["--harness", "lm-eval", "--out", "/proc/tasks"], "cannot use /proc/tasks as an output"),
    ("samples-0", [*LM_EVAL, "--samples", "0"], "--samples: must be at least 1, got 0"),
    ("seed-negative", [*LM_EVAL, "--seed", "-1"], "--seed: must be at least 0, got -1"),
    ("task-unknown", [*LM_EVAL, "--tasks", "div"], "unknown task 'div'"),
    ("task-twice", [*LM_EVAL, "--tasks", "add,add"], "lists add twice"),
    ("length-0", [*LM_EVAL, "--lengths", "0"], "length must be at least 1, got 0"),
    ("config-unknown", [*LM_EVAL, "--config", "nope"], "unknown config 'nope'"),
    ("model-unknown", [*LM_EVAL, "--model", "gpt-7"], "unknown model 'gpt-7'"),
    ("prompt-unknown", [*LM_EVAL, "--prompt", "two-shot"], "invalid choice: 'two-shot'"),
    ("abbreviated", ["--harn", "lm-eval", "--out", "tasks"], "--harn is not a flag; write it in full: --harness"),
    ("out-inside-a-run", ["--harness", "lm-eval", "--out", "run_csv_latin1/tasks"], "lies inside the run directory"),
    ("out-holds-users-files", ["--harness", "lm-eval", "--out", "model_dir"], "did not write (config.json)"),
    ("served-without-tokenizer", [*LM_EVAL, "--model", "llama-served"], "names no tokenizer to count budgets"),
]


def curve(name: str, summary: bytes | None, fragment: str) -> tuple:
    return (name, ["--run", "ft_run", "--out", "curve_out"], fragment, ("ft_run/adapter/train_summary.json", summary))


CURVE = [
    ("run-missing", ["--run", "gone", "--out", "c"], "gone does not exist"),
    ("no-snapshots", ["--run", "empty_dir", "--out", "c"], "has no adapter snapshots"),
    curve("summary-not-json", b"{", "is not valid JSON"),
    curve("summary-a-list", b"[1]", "must hold a JSON object, got list"),
    curve("summary-not-utf8", b'{"samples": "\xe9"}', "is not UTF-8 text"),
    curve("summary-no-samples", b'{"steps": 3}', "says no number of training examples"),
    curve("summary-samples-text", b'{"samples": "many"}', "says no number of training examples"),
    ("samples-0", ["--run", "ft_run", "--out", "c", "--samples", "0"], "--samples: must be at least 1"),
    ("out-a-file", ["--run", "ft_run", "--out", "a_file"], "is a file"),
    ("abbreviated", ["--ru", "ft_run"], "--ru is not a flag; write it in full"),
]
