"""Where a model's weights are, for the tools that import it from here (../shared/tools/device-stage.sh reads
``resolve_weights``); it lives in harness/models/weights.py."""

from harness.models.weights import *  # noqa: F403  (its public names, where outside tools import them)
from harness.models.weights import resolve_weights  # noqa: F401  (named: the staging tool's import)
