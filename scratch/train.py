"""Train one small Transformer from scratch on one arithmetic task at one precision, then evaluate it.

    python -m scratch.train --op add --operands 3 --base 2 --length 4 --precision bf16 --steps 3000 \\
        --fixed-width --out runs/scratch/one

Paper settings (appendix tab:model_config, tab:training_config): depth 3 or 5, hidden 256, 4 heads, RoPE,
NewGELU; AdamW lr 1e-3, betas (0.9, 0.999), weight decay 0.01, cosine schedule with warmup; loss on the
answer tokens; batch 512 for 100k steps; 50k test samples. The defaults below are those, except steps,
test size and warmup, which a CPU cannot afford at the paper's values.

``--device auto|cpu|cuda|cuda:N`` (auto: CUDA when present) holds the model, optimizer and batches; digits are
drawn on the CPU, so a seed gives the same data on every device, and the rest of a batch is made on the device, 64
batches at a time (scratch/data.py). On CUDA, fp32 runs with TF32 off and ``tf32`` is a precision of its own; each
summary records the device and the matmul precision in force. On CUDA the step has no host synchronisation, AdamW
is fused, and forward and backward are compiled with CUDA graphs (``--compile auto|on|off``); a compiled step that
fails falls back to eager, a fused attention kernel that fails to the math kernel (``--attention``), each said.

``run_pack`` trains several runs of one shape (``pack_key``: the seeds of a cell) as one batched model
(scratch/pack.py); each run keeps its own weights, data, loss, optimizer state, checkpoint and summary. ``run`` is
a pack of one.

Accuracy is exact match under greedy decoding. It is computed in one teacher-forced pass: a sequence
counts when the argmax at every answer position (and at <eos>) is the right token, which is exactly when
greedy generation would reproduce the answer. Checkpoints (model, optimizer, schedule, data stream) are
written at every evaluation; rerunning the same command resumes from the last one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from harness.core.cli import ArgParser, command_line, name_list, output_dir
from harness.core.cli import run as cli_run
from harness.core.errors import UserError
from harness.core.lock import DirectoryLock
from harness.runs.trackers import Trackers, add_report_to_flag, check_folders
from scratch.config import (
    LIMITS,
    RunConfig,
)
from scratch.training import (
    read_checkpoint,
    run,
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgParser(prog="python -m scratch.train", description=__doc__.split("\n\n")[0])
    for name, value in asdict(RunConfig()).items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            parser.add_argument(flag, action="store_true")
        elif isinstance(value, list):
            parser.add_argument(flag, type=name_list, default=value)
        else:
            parser.add_argument(flag, type=LIMITS[name].arg if name in LIMITS else type(value), default=value)
    parser.add_argument("--out", type=output_dir, default=None, help="run directory: checkpoint.pt, summary.json")
    add_report_to_flag(parser)
    args = vars(parser.parse_args(argv))
    args.pop("verbose")  # read by harness/core/quiet.py before the imports
    out, report_to = args.pop("out"), args.pop("report_to")
    if report_to and not out:
        raise UserError("--report-to writes under the run directory; give --out DIR")
    config = RunConfig.build(**args)
    if out:
        read_checkpoint(out / "checkpoint.pt", config)  # a checkpoint of another run is refused before any work
    check_folders(report_to, out or Path("."))
    lock = DirectoryLock(out, command_line("scratch.train", argv)) if out else None
    trackers = Trackers(report_to, out, out.name, asdict(config)) if report_to else None
    try:
        summary = run(config, out, on_eval=trackers and (lambda r, step, record: trackers.log(record, step)))
    finally:
        if trackers:
            trackers.close()
        if lock:
            lock.release()
    print(json.dumps({k: v for k, v in summary.items() if k not in ("history", "config")}, indent=2))
    return 0


if __name__ == "__main__":
    cli_run(main)
