import pytest


@pytest.fixture(scope="session")
def smollm2_fp32():
    """The real embedded default model, loaded once for the whole session (fp32, transformers backend)."""
    from harness.backends.hf import HFBackend
    from harness.models import get_model, get_precision, resolve_weights

    model = get_model("smollm2")
    return HFBackend(resolve_weights(model), get_precision(model, "fp32"), batch_size=16)
