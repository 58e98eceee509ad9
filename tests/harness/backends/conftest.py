"""The llama.cpp server of the api backend's tests (test_api.py, test_api_evidence.py: xdist group "api", one
worker), started once for both modules and stopped with Ctrl-C at the end: a start costs about 40 CPU-seconds."""

import pytest

from tests.console import foreign_lines
from tests.harness.backends.served import SMALL, Server, api, evaluate


@pytest.fixture(scope="session")
def server():
    served = Server().start()
    yield served
    foreign = foreign_lines(served.stop())
    assert not foreign, f"harness.serve spoke other libraries' lines: {foreign[:5]}"


@pytest.fixture(scope="session")
def clean_small(server, tmp_path_factory):
    """The small grid through the server with nothing in the way."""
    out = tmp_path_factory.mktemp("clean-small") / "run"
    assert evaluate(out, *api(server.url, "--concurrency", "1", grid=SMALL))[0] == 0
    return out
