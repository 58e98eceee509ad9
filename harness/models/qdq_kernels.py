"""A format's activation quantize-dequantize compiled ahead of time into a library on disk, loaded in milliseconds.

Compiling compressed-tensors' quantize-dequantize with ``torch.compile`` costs every process about 3 s on 2 cores
(importing dynamo and inductor 1 s, tracing the function and loading inductor's cached kernel 1.9 s) and every call
dynamo's guards (20-40 us); an FP4 evaluation of the quick grid lasts 15-20 s, so that was a fifth of what it spent
over bf16. Here the function is exported once (``torch.export``, the row count left free) and compiled by
AOTInductor into a package in numprec's cache (``qdq-kernels/``), named by everything that decides its code: the
format's args, the input's dtype and group width, the global scale's dtype and shape, torch's and compressed-tensors'
versions, the function's source and the CPU's flags (a cluster's nodes sharing a cache build one each). A process
loads a package with torch's C++ loader (2-3 ms, no Python import) and calls it without guards (about 13 us for a
decode step's row, 33 us for 40 rows, on 2 threads here). Building one costs 8-15 s on 2 cores, once a machine and
format; a package is written under a name of its own, loaded and checked against the eager function's bits, and only
then moved into place, so a killed or broken build leaves no file a later process would load. Builds take a lock:
processes building the same package at once wrote the same files in inductor's cache and packaged each other's
half-written ones (an empty kernel_metadata.json, seen in the suite: a package no process could load). A package
that does not load all the same is moved aside, said, and built again.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from tqdm import tqdm

from harness.core import vec_isa
from harness.core.errors import one_line
from harness.core.files import move_aside
from harness.core.paths import cache_root

# The kernel's OpenMP team is sized at each call (one package for any thread count); the bfloat16 roundings the
# eager code makes are kept (bit for bit with the library).
OPTIONS = {"emulate_precision_casts": True, "cpp.dynamic_threads": True}
EXAMPLE_ROWS = 64  # the example export traces with: any count above 1, so the row dimension stays free


class _Call(torch.nn.Module):
    """``function(rows, global_scale)`` as a module: what torch.export takes."""

    def __init__(self, function: Callable) -> None:
        super().__init__()
        self.function = function

    def forward(self, rows: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
        return self.function(rows, scale)


class Kernel:
    """A loaded package: called with a [1, rows, width] input (and the global scale where the format has one)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._runner = _load(path)

    def __call__(self, rows: torch.Tensor, global_scale: torch.Tensor | None) -> torch.Tensor:
        inputs = [rows] if global_scale is None else [rows, global_scale]
        return self._runner(inputs)[0]


def _load(path: Path) -> Callable[[list[torch.Tensor]], list[torch.Tensor]]:
    """torch's C++ package loader (no import of inductor's Python, 1.1 s of it); torch's public loader where this
    torch has no such binding."""
    binding = getattr(getattr(torch._C, "_aoti", None), "AOTIModelPackageLoader", None)
    if binding is not None:
        return binding(str(path), "model", False, 1, -1).run
    from torch._inductor import aoti_load_package

    runner = aoti_load_package(str(path))
    return lambda inputs: [runner(*inputs)]


@functools.cache
def _process_facts(function: Callable) -> dict:
    """What decides a package's code and stays the same through a process: read once, not for each layer's args."""
    import compressed_tensors

    return {
        "torch": torch.__version__,
        "compressed_tensors": compressed_tensors.__version__,
        "source": inspect.getsource(function),
        "options": OPTIONS,
        "machine": platform.machine(),
        "cpu": vec_isa.cpu_flags(),
    }


def package_path(function: Callable, args, dtype: torch.dtype, width: int, scale: torch.Tensor | None) -> Path:
    """Where the package for these inputs lives, named by what decides its code."""
    facts = {
        "args": json.loads(args.model_dump_json()),
        "dtype": str(dtype),
        "width": width,
        "global_scale": None if scale is None else [str(scale.dtype), list(scale.shape)],
        **_process_facts(function),
    }
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:24]
    return cache_root() / "qdq-kernels" / f"{args.num_bits}bit-{args.strategy}-{width}-{digest}.pt2"


def load(path: Path) -> Kernel | None:
    """The package at ``path``, loaded, or None where none is built or it does not load (then it is moved aside)."""
    if not path.is_file():
        return None
    try:
        return Kernel(path)
    except RuntimeError as failure:
        try:
            aside = move_aside(path)
        except FileNotFoundError:  # another process found it broken and moved it first
            return None
        tqdm.write(f"numprec: {path.name} does not load ({one_line(failure)}); moved to {aside.name}", file=sys.stderr)
        return None


def build(function: Callable, dtype: torch.dtype, width: int, scale: torch.Tensor | None, path: Path) -> Kernel:
    """Export ``function`` with its row count free, compile it with AOTInductor into ``path`` and load it; where
    another process built it meanwhile, load that."""
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path.parent / ".build.lock")):
        kernel = load(path)
        if kernel is None:
            own = path.with_name(f".{path.stem}.{os.getpid()}.pt2")  # this process's file until it is whole
            # above a progress bar where one is drawn, not into its line
            message = f"numprec: compiling the activation quantizer for this CPU: {path.name} (once, ~10 s)"
            tqdm.write(message, file=sys.stderr)
            try:
                kernel = _build_checked(function, dtype, width, scale, own)
                os.replace(own, path)
            finally:
                own.unlink(missing_ok=True)  # this process's own unfinished file, where the build failed
            kernel.path = path
    return kernel


def _build_checked(function: Callable, dtype: torch.dtype, width: int, scale: torch.Tensor | None, own: Path) -> Kernel:
    """The package built at ``own``, loaded, and its output on random rows checked against ``function``'s bits."""
    example = [torch.ones(1, EXAMPLE_ROWS, width, dtype=dtype)]
    if scale is not None:
        example.append(scale.clone())
    shapes = {"rows": {1: torch.export.Dim("rows", min=1)}} | ({} if scale is None else {"scale": None})
    vec_isa.remember()  # inductor's check of the CPU's vector instructions, once a machine
    # Run eagerly first: compressed-tensors keeps its range constants in an lru_cache made at their first call, and a
    # first call under export's fake tensors would leave fake constants there for every eager call after.
    function(example[0], scale)
    program = torch.export.export(_Call(function), tuple(example), dynamic_shapes=shapes)
    from torch._inductor import aoti_compile_and_package

    aoti_compile_and_package(program, package_path=str(own), inductor_configs=OPTIONS)
    kernel = Kernel(own)
    generator = torch.Generator().manual_seed(0)
    spread = torch.exp(2 * torch.randn(1, 8, width, generator=generator))  # values over many binades
    rows = (torch.randn(1, 8, width, generator=generator) * spread).to(dtype)
    if not torch.equal(_bits(kernel(rows, scale)), _bits(function(rows, scale))):
        raise RuntimeError("the compiled quantize-dequantize does not give the library's bits")
    return kernel


def _bits(value: torch.Tensor) -> torch.Tensor:
    return value.view({2: torch.int16, 4: torch.int32}[value.element_size()])
