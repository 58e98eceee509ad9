"""Tests hold on a machine with or without a CUDA GPU: what asserts the no-GPU error skips where CUDA is
present, and tests marked ``gpu`` (the CUDA paths) run only where it is (tests/conftest.py)."""

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()

# The one-line "needs a CUDA GPU" refusals can only be seen on a machine without one.
without_cuda = pytest.mark.skipif(HAS_CUDA, reason="asserts the no-GPU refusal; this machine has CUDA")
