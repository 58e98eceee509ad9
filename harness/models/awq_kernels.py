"""Which gptqmodel kernel runs an AutoAWQ int4 checkpoint: chosen, named and, where it must be built, built before the
model loads.

transformers 5 loads AutoAWQ checkpoints through gptqmodel, which picks a kernel as the checkpoint loads. On a GPU its
first choice, Marlin, is a C++/CUDA extension that gptqmodel JIT-builds with ninja inside ``from_pretrained`` the
first time it is used: minutes, with nothing said (on an H100, 2026-11-26: still building after 150 s). Here:

- on a CPU: gptqmodel's ATen int4 kernel, which needs no build;
- on a GPU: Marlin where its extension is built (gptqmodel caches it under ~/.cache/gptqmodel/torch_extensions);
  where it is not, it is built now, once, with a line saying so and another saying how long (``python -m
  harness.awq_kernels --build``, which scripts/setup.sh runs on a machine with a GPU, builds it ahead); where it
  cannot be built (no CUDA compiler, no ninja, or not the CUDA headers Marlin includes), Triton's AWQ kernel, or
  torch's, which need no build; a build that fails falls back to them too, with one line that says why;
- ``NUMPREC_AWQ_KERNEL=marlin|triton|torch`` chooses one.

The kernel that ran is read off the loaded model into every row (harness/backends/hf_loading.py's ``linear_kernel``).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import UserError


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
# The CUDA library headers Marlin's sources include: a toolkit without them (a runtime-only image) cannot build it.
MARLIN_HEADERS = ("cusparse.h", "cublas_v2.h", "cublasLt.h", "cusolverDn.h")
_BUILT: dict[str, bool] = {}  # per extension: gptqmodel's cache checked once a process (its check runs nvcc)


class Machine:
    """What this machine has for gptqmodel's kernels (a test passes one that pretends otherwise)."""

    def built(self, extension: str) -> bool:
        """Whether gptqmodel's cache holds the extension, built for this torch and GPU (asked once a process)."""
        if extension not in _BUILT:
            _BUILT[extension] = self._cached_build(extension)
        return _BUILT[extension]

    @staticmethod
    def _cached_build(extension: str) -> bool:
        try:
            from gptqmodel.extension import _extension_for_name

            compiled = _extension_for_name(extension)
            return any(path.is_file() for path in compiled._candidate_binary_paths(compiled.build_root()))
        except Exception:  # noqa: BLE001 (any failure to tell means it is not known to be built)
            return False

    def can_build(self) -> bool:
        """A CUDA compiler, ninja and the CUDA library headers Marlin includes, which gptqmodel's JIT build needs."""
        cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
        nvcc = shutil.which("nvcc") or (os.path.join(cuda_home, "bin", "nvcc") if os.path.isfile(
            os.path.join(cuda_home, "bin", "nvcc")) else None)  # fmt: skip
        if not (nvcc and shutil.which("ninja")):
            return False
        return not missing_headers(header_dirs(Path(nvcc).resolve().parent.parent, cuda_home))

    def has_triton(self) -> bool:
        import importlib.util

        return importlib.util.find_spec("triton") is not None

    def build(self, extension: str) -> str | None:
        """Build the extension; None when built, else why not (gptqmodel raises where a build fails)."""
        try:
            from gptqmodel.extension import load

            ok = load(extension).get(extension)
        except Exception as err:  # noqa: BLE001 (a failed build must fall back, whatever gptqmodel raised)
            return " ".join(str(err).split())[:200] or type(err).__name__
        _BUILT[extension] = bool(ok)
        return None if ok else "gptqmodel reported no error but did not load it"

    def build_seconds(self, extension: str) -> float:
        """gptqmodel's own estimate of the build, for the line that announces it."""
        try:
            from gptqmodel.extension import _extension_for_name

            return float(_extension_for_name(extension).compile_baseline_seconds)
        except Exception:  # noqa: BLE001
            return 0.0


def header_dirs(*toolkits: Path) -> list[Path]:
    """Where CUDA's headers may be: each toolkit's include folders, and the nvidia-* wheels' (pip's CUDA)."""
    dirs = [toolkit / sub for toolkit in map(Path, toolkits) for sub in ("include", "targets/x86_64-linux/include")]
    try:
        import nvidia

        dirs += [path for root in nvidia.__path__ for path in Path(root).glob("*/include")]
    except ImportError:
        pass
    return dirs


def missing_headers(dirs: list[Path]) -> list[str]:
    """The headers of MARLIN_HEADERS found in none of ``dirs``."""
    return [name for name in MARLIN_HEADERS if not any((folder / name).is_file() for folder in dirs)]


def fallback(machine: Machine) -> Kernel:
    """The kernel that needs no build: Triton's where Triton is, else torch's."""
    return KERNELS["triton"] if machine.has_triton() else KERNELS["torch"]


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
    return fallback(machine)


def prepare(kernel: Kernel, say: Callable[[str], object], machine: Machine | None = None) -> tuple[Kernel, float]:
    """The kernel ready to load: its extension built if it is not yet (said before, and how long after), or, where
    the build fails, the kernel that needs none (one line says why); with the seconds the build took (0: none)."""
    machine = machine or Machine()
    if kernel.extension is None or machine.built(kernel.extension):
        return kernel, 0.0
    estimate = machine.build_seconds(kernel.extension)
    about = f", about {estimate / 60:.0f} min" if estimate >= 60 else ""
    say(
        f"building gptqmodel's {kernel.name} kernel for AWQ int4 (once; kept in ~/.cache/gptqmodel{about}; "
        "python -m harness.awq_kernels --build does it ahead)"
    )
    started = time.perf_counter()
    failure = machine.build(kernel.extension)
    seconds = time.perf_counter() - started
    if failure is not None:
        instead = fallback(machine)
        say(f"could not build {kernel.name} in {seconds:.0f} s ({failure}); AWQ int4 runs on {instead.name} instead")
        return instead, seconds
    say(f"built {kernel.name} in {seconds:.0f} s")
    return kernel, seconds
