import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def pytest_collection_modifyitems(config, items):
    """``@pytest.mark.gpu`` tests exercise CUDA paths: run whenever CUDA is present, skipped (and said so) otherwise."""
    from tests.devices import HAS_CUDA

    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (marked gpu); runs on GPU machines")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
