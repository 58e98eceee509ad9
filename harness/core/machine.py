"""Where a result was computed, described one way for runs, bench reports and training runs: the CPU and the
instructions its kernels can use, the GPU, and the versions of the libraries whose kernels compute.

Machines of one name differ: an AVX2-only EPYC multiplies bf16 several times slower than one with AMX, and
bitsandbytes' CPU nf4 kernels round differently with and without AVX-512 (a run made on one and repeated on the other
agreed on 272 of 280 nf4 outputs). A run records the machine of every cell it computed (results.csv's ``machine``
column names an entry of run.json's ``machines``), so ``harness.diff`` can say when two runs' outputs differ because
their kernels did.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

# The flags that decide which CPU kernels run (torch's dispatch, ggml's, bitsandbytes', oneDNN's).
CPU_FLAGS = ("avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16")
CPU_FLAGS += ("avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "asimd", "sve")
# Distributions whose code computes a result (kernels, numerics) or decides what is computed.
LIBRARIES = ("numprec", "torch", "transformers", "accelerate", "peft", "bitsandbytes", "llama_cpp_python")
LIBRARIES += ("gptqmodel", "compressed-tensors", "vllm", "openai", "numpy", "trl", "lm_eval")


def _cpuinfo() -> list[str]:
    info = Path("/proc/cpuinfo")
    try:
        return info.read_text().splitlines() if info.exists() else []
    except OSError:
        return []


def cpu_name() -> str:
    """The CPU's model name, from /proc/cpuinfo (platform's own guess elsewhere)."""
    found = (line.split(":", 1)[1].strip() for line in _cpuinfo() if line.startswith("model name"))
    return next(found, platform.processor() or platform.machine())


def cpu_flags() -> list[str]:
    """Which of CPU_FLAGS this CPU has."""
    flags = {word for line in _cpuinfo() if line.startswith(("flags", "Features")) for word in line.split()}
    return [flag for flag in CPU_FLAGS if flag in flags]


def cpu_bf16_instructions() -> list[str]:
    """This CPU's bfloat16 instructions (avx512_bf16, amx_bf16); none on an AVX2-only CPU, where torch multiplies
    bfloat16 several times slower than float32 (and 10-30x slower through a transposed weight), while a CPU with AMX
    multiplies it several times faster."""
    return [flag for flag in cpu_flags() if flag in ("avx512_bf16", "amx_bf16")]


# The kinds of CPU whose kernels compute differently, from the flags that decide it. torch multiplies bfloat16 with
# AMX tiles ("amx"), with AVX-512's bf16 dot products ("avx512-bf16"), or by widening to float32 ("avx512", "avx2"),
# and each sums a dot product in its own order; ggml and bitsandbytes pick their kernels by AVX-512 or AVX2.
CPU_KINDS = ("avx2", "avx512", "avx512-bf16", "amx", "other")


def cpu_kind(flags: list[str] | None = None) -> str:
    """This CPU's kind (CPU_KINDS), or that of a CPU with ``flags``: the most capable whose flags it has.

    >>> cpu_kind(["avx2", "fma"]), cpu_kind(["avx2", "avx512f", "avx512bw"]), cpu_kind(["avx512f", "avx512_bf16"])
    ('avx2', 'avx512', 'avx512-bf16')
    >>> cpu_kind(["avx512f", "avx512_bf16", "amx_tile", "amx_bf16"]), cpu_kind(["asimd"])
    ('amx', 'other')
    """
    have = set(cpu_flags() if flags is None else flags)
    for kind, needs in (("amx", "amx_bf16"), ("avx512-bf16", "avx512_bf16"), ("avx512", "avx512f"), ("avx2", "avx2")):
        if needs in have:
            return kind
    return "other"


def library_versions(names: tuple[str, ...] = LIBRARIES) -> dict[str, str]:
    """Installed versions of ``names`` (the ones not installed are left out)."""
    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def describe() -> dict:
    """This machine, as every record writes it. torch's kernel dispatch level and the GPU are read only where torch
    is already imported (a command that computes has imported it; one that only reads does not pay for it)."""
    torch = sys.modules.get("torch")
    description = {
        "cpu": cpu_name(),
        "cpu_flags": cpu_flags(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "libraries": library_versions(),
    }
    if torch is not None:
        description["torch_cpu_kernels"] = torch.backends.cpu.get_cpu_capability()
        if torch.cuda.is_available():
            description["gpu"] = [
                f"{torch.cuda.get_device_name(i)} (compute {'.'.join(map(str, torch.cuda.get_device_capability(i)))})"
                for i in range(torch.cuda.device_count())
            ]
            description["cuda"] = torch.version.cuda
    return description


def machine_id(description: dict) -> str:
    """8 hex digits naming a description (the same machine and libraries give the same id)."""
    text = json.dumps(description, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def one_line(description: dict) -> str:
    """'CPU (flags; torch kernels X), GPU, torch 2.13.0, bitsandbytes 0.50.0, ...' for reports."""
    kernels = f"; torch kernels {description['torch_cpu_kernels']}" if "torch_cpu_kernels" in description else ""
    parts = [
        f"{description.get('cpu', '?')} ({', '.join(description.get('cpu_flags', [])) or 'no flags read'}{kernels})"
    ]
    parts += description.get("gpu", [])
    parts += [f"{name} {value}" for name, value in sorted(description.get("libraries", {}).items())]
    return ", ".join(parts)


def differences(first: dict, second: dict) -> list[str]:
    """What differs between two descriptions that can change an output: CPU flags and kernels, GPU, libraries."""
    found = []
    only_first = [flag for flag in first.get("cpu_flags", []) if flag not in second.get("cpu_flags", [])]
    only_second = [flag for flag in second.get("cpu_flags", []) if flag not in first.get("cpu_flags", [])]
    if only_first or only_second:
        found.append(
            "CPU instructions: "
            + "; ".join(
                f"{', '.join(flags)} only in the {which}"
                for flags, which in ((only_first, "first"), (only_second, "second"))
                if flags
            )
        )
    for key, what in (("torch_cpu_kernels", "torch CPU kernels"), ("gpu", "GPU"), ("cuda", "CUDA")):
        if first.get(key) != second.get(key):
            found.append(f"{what} {first.get(key) or 'none'} vs {second.get(key) or 'none'}")
    libraries = sorted(set(first.get("libraries", {})) | set(second.get("libraries", {})))
    for name in libraries:
        a, b = first.get("libraries", {}).get(name), second.get("libraries", {}).get(name)
        if a != b and name != "numprec":
            found.append(f"{name} {a or 'not installed'} vs {b or 'not installed'}")
    return found
