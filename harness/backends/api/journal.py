"""The served run's evidence: every completed response appended to responses.jsonl as it arrives, keyed by its
request and digested, read back and checked on resume."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

from harness.backends.api.endpoint import (
    Endpoint,
    shown_url,
)
from harness.core.errors import UserError
from harness.core.files import append_lines, atomic_write_bytes, parse_json_line, read_lines


def request_key(request: dict) -> str:
    return hashlib.sha256(json.dumps(request, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:32]


# What a journal entry's digest covers: its request's key and everything the reply said.
REPLY_FIELDS = (
    *("key", "text", "finish_reason", "prompt_tokens", "completion_tokens", "model", "asked", "endpoint"),
    *("reply_chars", "cut"),
)


def entry_digest(entry: dict) -> str:
    text = json.dumps({name: entry.get(name) for name in REPLY_FIELDS}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class Journal:
    """responses.jsonl: one line per completed request, appended and synced as each arrives, checked when read back:
    an entry that is no entry (cut by a kill, garbage), was edited (its digest differs or is gone) or repeats a key
    with another reply is dropped, its request sent again, and the repair said in ``repairs``. A journal written
    before entries carried digests (none has one) is read as it is and given them."""

    def __init__(self, path: Path | None, repair: bool = True):
        """Read ``path``; with ``repair`` (the backend's own reading) a journal that needed repairs is rewritten
        without the dropped entries; without (a check before any file is written), nothing is."""
        self.path, self.lock, self.done, self.repairs = path, threading.Lock(), {}, []
        if path is None or not path.exists():
            return
        entries, damaged = [], 0
        for raw, line in read_lines(path):
            entry = parse_json_line(line) if line is not None else None
            if not (
                isinstance(entry, dict) and isinstance(entry.get("key"), str) and isinstance(entry.get("text"), str)
            ):
                damaged += raw.strip() != b""
                continue
            entries.append(entry)
        legacy = bool(entries) and not any("digest" in entry for entry in entries)
        edited, by_key = 0, {}
        for entry in entries:
            if legacy:
                entry = {**entry, "digest": entry_digest(entry)}
            if entry.get("digest") != entry_digest(entry):
                edited += 1
                continue
            by_key.setdefault(entry["key"], []).append(entry)
        repeated = 0
        for key, found in by_key.items():
            if len({entry["digest"] for entry in found}) > 1:  # one request, two replies: which is the evidence?
                repeated += len(found)
                continue
            self.done[key] = found[0]
        for count, what in ((damaged, "damaged"), (edited, "edited"), (repeated, "repeated with another reply")):
            if count:
                self.repairs.append(f"{count} {what} response(s) of responses.jsonl dropped; requested again")
        if legacy:
            self.repairs.append(f"responses written before they carried digests: a digest added to {len(entries)}")
        if self.repairs and repair:
            kept = "".join(json.dumps(entry, ensure_ascii=False) + "\n" for entry in self.done.values())
            atomic_write_bytes(path, kept.encode("utf-8"))

    def add(self, record: dict) -> None:
        record = {**record, "digest": entry_digest(record)}
        with self.lock:
            self.done[record["key"]] = record
            if self.path is not None:
                append_lines(self.path, [json.dumps(record, ensure_ascii=False) + "\n"])

    def answered_by(self) -> tuple[set[str], set[str]]:
        """(the endpoints, the models asked) of every entry: where and of what this run asked before."""
        endpoints = {entry["endpoint"] for entry in self.done.values() if entry.get("endpoint")}
        asked = {entry["asked"] for entry in self.done.values() if entry.get("asked")}
        return endpoints, asked


def check_resume(journal: Journal, endpoint: Endpoint) -> list[str]:
    """A run resumed against other endpoints or another model than its journal's is refused in one line, unless
    ``allow_other_endpoint``; then the other endpoints are returned, to be said."""
    before, asked = journal.answered_by()
    now = {shown_url(base) for base in endpoint.bases}
    others = sorted(before - now)
    if asked and endpoint.model not in asked:
        raise UserError(
            f"this run's responses were asked of model {sorted(asked)[0]!r}, not {endpoint.model!r}: a cell would mix "
            "two models; pass the run's --api-model, or another --out"
        )
    if others and not endpoint.allow_other_endpoint:
        raise UserError(
            f"this run's responses came from {', '.join(others)}, not from {', '.join(sorted(now))}: a cell would mix "
            "two servers; give the same --api-base, or --api-allow-other-endpoint to let both answer (rows and "
            "summary.md then name both), or another --out"
        )
    return others
