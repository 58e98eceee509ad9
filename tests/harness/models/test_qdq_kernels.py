"""harness/models/qdq_kernels.py: a format's compiled quantize-dequantize is built once into numprec's cache and
loaded by later processes without building; a build killed midway leaves no package a later process would load, and
the next process builds it whole. Each step is a process of its own, as users' commands are."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import torch

# quantize_dequantize of one MXFP4 input by the compiled path, saved; then the library's own result beside it
SCRIPT = """
import sys, types, torch
from compressed_tensors.quantization import preset_name_to_scheme
from harness.models import activation_qdq, fp4
fp4.register()
args = preset_name_to_scheme("MXFP4", ["Linear"]).input_activations
generator = torch.Generator().manual_seed(0)
value = (torch.randn(40, 576, generator=generator) * torch.exp(2 * torch.randn(40, 576, generator=generator)))
value = value.to(torch.bfloat16)
activation_qdq.install(compile_after=0)
library = activation_qdq.library_forward_quantize()
layer = types.SimpleNamespace(quantization_status=None)
torch.save([activation_qdq.quantize_dequantize(value, None, args), library(layer, value, "input", args)], sys.argv[1])
"""
COMPILING = "numprec: compiling the activation quantizer"


def start(cache: Path, out: Path) -> subprocess.Popen:
    environment = {**os.environ, "NUMPREC_CACHE": str(cache)}
    command = [sys.executable, "-c", SCRIPT, str(out)]
    return subprocess.Popen(command, env=environment, stderr=subprocess.PIPE, text=True)


def finish(cache: Path, name: str) -> str:
    """The script run to its end with ``cache`` as numprec's cache: its stderr."""
    process = start(cache, cache / name)
    _, errors = process.communicate(timeout=600)
    assert process.returncode == 0, errors[-2000:]
    return errors


def packages(cache: Path) -> list[Path]:
    return sorted((cache / "qdq-kernels").glob("[!.]*.pt2"))


def same_bits(saved: Path) -> bool:
    compiled, library = torch.load(saved)
    return torch.equal(compiled.view(torch.int16), library.view(torch.int16))


def test_a_killed_build_leaves_no_package_and_the_next_process_builds_it_for_every_later_one(tmp_path):
    """Killed while building: no package. Two processes at once: one builds (under the lock), the other waits and
    loads what it built. A package that does not load (the half-written metadata racing builds packaged before the
    lock) is moved aside, said, and built again."""
    killed = start(tmp_path, tmp_path / "killed.pt")
    for line in killed.stderr:  # bounded: the process ends, and its stderr with it
        if COMPILING in line:
            time.sleep(1.0)  # into the export and compile
            killed.send_signal(signal.SIGKILL)
            break
    assert killed.wait(timeout=120) == -signal.SIGKILL  # the fault fired: killed while building
    assert packages(tmp_path) == [] and not (tmp_path / "killed.pt").exists()
    together = [start(tmp_path, tmp_path / f"{name}.pt") for name in ("first", "second")]
    said = [process.communicate(timeout=600)[1] for process in together]
    assert [process.returncode for process in together] == [0, 0], [err[-2000:] for err in said]
    assert sum(COMPILING in err for err in said) == 1, "one builds, the other loads its package"
    assert same_bits(tmp_path / "first.pt") and same_bits(tmp_path / "second.pt")
    (package,) = packages(tmp_path)
    empty_the_kernel_metadata(package)
    said = finish(tmp_path, "rebuilt.pt")
    assert f"{package.name} does not load" in said and COMPILING in said, said[-2000:]
    (aside,) = [path for path in packages(tmp_path) if path != package]
    assert aside.name in said and aside.name.startswith(f"{package.stem}.previous-"), "moved aside, not deleted"
    assert same_bits(tmp_path / "rebuilt.pt")


def empty_the_kernel_metadata(package: Path) -> None:
    """The package as two builds racing in one inductor cache left it: its kernel's metadata JSON empty."""
    with zipfile.ZipFile(package) as whole:
        entries = [(info, whole.read(info)) for info in whole.infolist()]
    emptied = [info.filename for info, _ in entries if info.filename.endswith(".kernel_metadata.json")]
    assert emptied, [info.filename for info, _ in entries]
    with zipfile.ZipFile(package, "w") as broken:
        for info, data in entries:
            broken.writestr(info, b"" if info.filename in emptied else data)
