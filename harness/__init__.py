"""numprec harness: evaluate language models on the paper's arithmetic tasks at a chosen precision."""

from harness.core import startup  # noqa: F401  (thread settings and a quiet Ctrl-C before torch loads)
