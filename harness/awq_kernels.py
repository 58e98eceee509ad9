"""Which gptqmodel kernel runs an AutoAWQ int4 checkpoint: chosen, named and, where it must be built, built before the
model loads.

transformers 5 loads AutoAWQ checkpoints through gptqmodel, which picks a kernel as the checkpoint loads. On a GPU its
first choice, Marlin, is a C++/CUDA extension that gptqmodel JIT-builds with ninja inside ``from_pretrained`` the
first time it is used: minutes, with nothing said (on an H100, 2026-11-26: still building after 150 s). Here:

- on a CPU: gptqmodel's ATen int4 kernel, which needs no build;
- on a GPU: Marlin where its extension is built (gptqmodel caches it under ~/.cache/gptqmodel/torch_extensions);
  where it is not, it is built now, once, with a line saying so and another saying how long (``python -m
  harness.awq_kernels --build``, which scripts/setup.sh runs on a machine with a GPU, builds it ahead); where it
  cannot be built (no CUDA compiler), Triton's AWQ kernel, or torch's, which need no build;
- ``NUMPREC_AWQ_KERNEL=marlin|triton|torch`` chooses one.

The kernel that ran is read off the loaded model into every row (harness/backends/hf.py's ``linear_kernel``).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness.cli import ArgParser, run
from harness.errors import UserError


@dataclass(frozen=True)
class Kernel:
    """A gptqmodel AWQ kernel: transformers' AwqConfig backend that selects it, its class as rows name it, and the
    gptqmodel extension it needs built (None: none)."""

    backend: str
    name: str
    extension: str | None = None


KERNELS = {
    "marlin": Kernel("marlin", "gptqmodel.AwqMarlinLinear", "marlin_fp16"),
    "triton": Kernel("gemm_triton", "gptqmodel.AwqGEMMTritonLinear"),
    "torch": Kernel("torch_awq", "gptqmodel.AwqTorchLinear"),
}
CPU_KERNEL = Kernel("auto", "gptqmodel.TorchAtenAwqLinear")
CHOICE = "NUMPREC_AWQ_KERNEL"


class Machine:
    """What this machine has for gptqmodel's kernels (a test passes one that pretends otherwise)."""

    def built(self, extension: str) -> bool:
        """Whether gptqmodel's cache holds the extension, built for this torch and GPU."""
        try:
            from gptqmodel.extension import _extension_for_name

            compiled = _extension_for_name(extension)
            return any(path.is_file() for path in compiled._candidate_binary_paths(compiled.build_root()))
        except Exception:  # noqa: BLE001 (any failure to tell means it is not known to be built)
            return False

    def can_build(self) -> bool:
        """A CUDA compiler and ninja, which gptqmodel's JIT build needs."""
        return bool(shutil.which("ninja")) and bool(
            shutil.which("nvcc")
            or os.path.isfile(os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc"))
        )

    def has_triton(self) -> bool:
        import importlib.util

        return importlib.util.find_spec("triton") is not None

    def build(self, extension: str) -> None:
        from gptqmodel.extension import error, load

        if not load(extension).get(extension):
            raise UserError(f"gptqmodel could not build its {extension} kernel ({error(extension)[:200]})")

    def build_seconds(self, extension: str) -> float:
        """gptqmodel's own estimate of the build, for the line that announces it."""
        try:
            from gptqmodel.extension import _extension_for_name

            return float(_extension_for_name(extension).compile_baseline_seconds)
        except Exception:  # noqa: BLE001
            return 0.0


def wanted_kernel(wanted: str | None = None) -> str:
    """NUMPREC_AWQ_KERNEL's choice ('' for none; ``wanted`` instead where given), one line when it names none:
    harness.eval asks before any work, whatever the machine."""
    wanted = os.environ.get(CHOICE, "") if wanted is None else wanted
    if wanted and wanted not in KERNELS:
        raise UserError(f"{CHOICE}={wanted} names no AWQ kernel; use one of {', '.join(KERNELS)}")
    return wanted


def choose(device: str, machine: Machine | None = None, wanted: str | None = None) -> Kernel:
    """The kernel an AWQ checkpoint will run on ``device`` (see the module docstring)."""
    machine = machine or Machine()
    wanted = wanted_kernel(wanted)
    if not device.startswith("cuda"):
        return CPU_KERNEL
    if wanted:
        return KERNELS[wanted]
    marlin = KERNELS["marlin"]
    if machine.built(marlin.extension) or machine.can_build():
        return marlin
    return KERNELS["triton"] if machine.has_triton() else KERNELS["torch"]


def prepare(kernel: Kernel, say: Callable[[str], object], machine: Machine | None = None) -> float:
    """Build the kernel's extension if it is not built yet, saying so before and how long after; returns the
    seconds it took (0 when there was nothing to build)."""
    machine = machine or Machine()
    if kernel.extension is None or machine.built(kernel.extension):
        return 0.0
    estimate = machine.build_seconds(kernel.extension)
    about = f", about {estimate / 60:.0f} min" if estimate >= 60 else ""
    say(
        f"building gptqmodel's {kernel.name} kernel for AWQ int4 (once; kept in ~/.cache/gptqmodel{about}; "
        "python -m harness.awq_kernels --build does it ahead)"
    )
    started = time.perf_counter()
    machine.build(kernel.extension)
    seconds = time.perf_counter() - started
    say(f"built {kernel.name} in {seconds:.0f} s")
    return seconds


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgParser(prog="python -m harness.awq_kernels", description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", action="store_true", help="build the kernel this machine's GPU will use, now")
    args = parser.parse_args(argv)
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    kernel = choose(device)
    if args.build:
        prepare(kernel, print)
    built = kernel.extension is None or Machine().built(kernel.extension)
    print(f"AWQ int4 on {device}: {kernel.name} ({'ready' if built else 'built when first used'})")
    return 0


if __name__ == "__main__":
    run(main)
