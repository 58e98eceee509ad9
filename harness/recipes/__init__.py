"""Mixed-precision recipes: which layer groups of a model cost the arithmetic at a target format, and which mix to
deploy instead (harness.sensitivity). One idea a module:

- groups: the units a deployment gives a scheme of their own, aligned with vLLM's fused layers;
- teacher: the signal, the teacher-forced log-probability of the gold answer's tokens and its exact match;
- mixer: one model whose groups are switched between the target's layers and the kept precision's;
- table: each group scored two ways (restore one, quantize one), saved as it goes, cached, drawn.

A stage above runs/ and reports/, under the commands (pyproject.toml's import-linter contract).
"""
