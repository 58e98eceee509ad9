import harness.core.startup  # noqa: F401  (thread settings and a quiet Ctrl-C before torch loads)
