"""Experiment grids as YAML files; `--config NAME` finds NAME.yaml here, or pass a path."""
