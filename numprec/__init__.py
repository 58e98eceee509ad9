"""The name other harnesses know numprec by: inspect_ai registers a package's tasks under its top-level package, so
``inspect eval numprec/arithmetic`` finds numprec/inspect_task.py here (the harness itself is harness/)."""
