"""The api backend: a model served behind an OpenAI-compatible endpoint, one job a file: endpoint.py (where it is,
its key, clients, preflight and one-line errors), journal.py (responses.jsonl, the evidence of what answered),
retries.py (which failures are tried again) and backend.py (APIBackend: requests, pacing, stop and cut; its
docstring tells the whole protocol)."""

from harness.backends.api.backend import APIBackend
from harness.backends.api.endpoint import KEY_VARIABLES, MASK, NO_KEY, Endpoint, api_key, parse_bases, preflight
from harness.backends.api.journal import REPLY_FIELDS, Journal, check_resume, entry_digest, request_key

__all__ = [
    "APIBackend",
    "Endpoint",
    "Journal",
    "KEY_VARIABLES",
    "MASK",
    "NO_KEY",
    "REPLY_FIELDS",
    "api_key",
    "check_resume",
    "entry_digest",
    "parse_bases",
    "preflight",
    "request_key",
]
