"""``python -m harness.awq_kernels``: gptqmodel's AWQ int4 kernel, built or checked; it lives in
harness/models/awq_kernels.py."""

from harness.core.cli import run
from harness.models.awq_kernels import main

if __name__ == "__main__":
    run(main)
