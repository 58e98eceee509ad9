"""gptqmodel's AWQ int4 kernel for this machine, built now (``--build``) or checked: the kernel AWQ int4 runs on here
and whether it is ready (harness/models/awq_kernels.py chooses and builds it).
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.core.cli import ArgParser, run
from harness.models.awq_kernels import Machine, choose, prepare


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgParser(prog="python -m harness.awq_kernels", description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", action="store_true", help="build the kernel this machine's GPU will use, now")
    args = parser.parse_args(argv)
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    kernel = choose(device)
    if args.build:
        kernel, _ = prepare(kernel, print)
    built = kernel.extension is None or Machine().built(kernel.extension)
    print(f"AWQ int4 on {device}: {kernel.name} ({'ready' if built else 'built when first used'})")
    return 0


if __name__ == "__main__":
    run(main)
