"""The api backend: a model served behind an OpenAI-compatible endpoint (vLLM, SGLang, llama.cpp's server, a hosted
API), through the official ``openai`` client.

    python -m harness.eval --backend api --api-base http://127.0.0.1:8000/v1 --api-model NAME --precision awq-w4

Two request modes: ``completions`` sends the prompt text the in-process backends feed the model (its chat template
applied here, from --model's tokenizer), ``chat`` sends the user message and lets the server apply its own template.
The paper's decoding maps to the request as greedy = temperature 0, paper = temperature 0.1, top-p 0.95 and top-k 50
where the server takes top_k (vLLM, SGLang and llama.cpp do; OpenAI's API does not, and the row says so), with no
repetition penalty (repeat_penalty 1.0: llama-cpp-python's server would apply 1.1 by default); every
request carries its problem's seed and the cell's token budget, and stops at the end of the first non-blank line
(the server stops at "\\n"; a completion that is still blank there is continued, in completions mode).

Several base URLs are replicas of one deployment: each request goes to the one with the fewest requests in flight.
At most --concurrency requests are in flight; the client keeps its connections open and retries 408/409/429/5xx,
timeouts and dropped connections with exponential backoff and jitter, honouring Retry-After (openai's own retry
loop); a reply that is not valid JSON, holds no completion, or whose text is not text (null) is retried the same way.

**What answered is evidence.** Every completed response is appended to the run directory's ``responses.jsonl`` as it
arrives, keyed by its request, with the model id the server says answered, the endpoint that answered (a redirect is
refused, not followed) and a digest of request and reply: a crash, Ctrl-C or kill -9 mid-cell loses no finished request
(Ctrl-C stops at once: requests still held at a server are abandoned), a resumed run sends only the missing ones, and an
entry edited, repeated with another text or cut short is dropped, said, and requested again. A reply from another model
than the one asked for is refused (one line, nothing of it kept) unless the user declares the id it answers as
(``--api-accept-model``; a dated snapshot of the asked name, such as ``gpt-4o-mini-2024-07-18`` for ``gpt-4o-mini``, is
the same model). A run resumed against other endpoints or another model than its journal names is refused, unless
``--api-allow-other-endpoint`` says both may answer; each row names every model and endpoint that answered its cell, and
summary.md lists the series answered by several. A reply that ran past the request's token budget or its first line (a
server that ignores the stop) is cut to them, as the in-process backends stop, and counted per cell (``cut_replies``).

**No key escapes.** The key comes from NUMPREC_API_KEY (or OPENAI_API_KEY); it, and every value of a base URL's query
string, is replaced by ``***`` in every message printed and every text written (a server that echoes the
Authorization header in its error, or the key in a completion, included).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from harness.answers import FIRST_LINE, AnswerMode
from harness.backends import ChatBackend, Generation, Sampling
from harness.backends.abandon import DeadlineExceeded, run_abandoning, within_deadline
from harness.backends.pacing import AdaptiveLimit
from harness.errors import UserError
from harness.files import append_lines, atomic_write_bytes, parse_json_line, read_lines
from harness.models import PrecisionSpec

KEY_VARIABLES = ("NUMPREC_API_KEY", "OPENAI_API_KEY")
NO_KEY = "not-needed"  # what local servers without a key receive (the client insists on some string)
MASK = "***"
_BEARER = re.compile(r"(Bearer|Basic)\s+[^\s\"',;()]+", re.IGNORECASE)
_SNAPSHOT = re.compile(r"-\d{4}-?\d{2}-?\d{2}$")  # gpt-4o-mini-2024-07-18: a dated snapshot of gpt-4o-mini


@dataclass(frozen=True)
class Endpoint:
    """Where and how requests go: base URLs (replicas), the served model's name, the request mode, the client's
    limits, the model ids the server may answer as besides the asked one, and whether a run may be resumed against
    other endpoints than its journal's."""

    bases: tuple[str, ...]
    model: str
    mode: str = "completions"  # or chat
    concurrency: int = 8
    timeout: float = 120.0
    retries: int = 5
    accept_models: tuple[str, ...] = ()
    allow_other_endpoint: bool = False

    @property
    def takes_top_k(self) -> bool:
        """OpenAI's own API refuses top_k; vLLM, SGLang and llama.cpp's servers take it."""
        return not any(urlsplit(base).hostname == "api.openai.com" for base in self.bases)

    def shown(self) -> str:
        """The endpoint for rows and reports: the base URLs without credentials or query."""
        return ",".join(shown_url(base) for base in self.bases)

    def accepts(self, answered: str | None) -> bool:
        """Whether a reply from model id ``answered`` is one from the asked model (None: the server did not say)."""
        if not answered or answered == self.model or answered in self.accept_models:
            return True
        return _SNAPSHOT.sub("", answered) == self.model

    @property
    def secrets(self) -> tuple[str, ...]:
        """What must never be printed or written: the key, and every value of a base URL's query string."""
        found = [api_key()] if api_key() != NO_KEY else []
        for base in self.bases:
            found += [value for _, value in parse_qsl(urlsplit(base).query) if len(value) >= 3]
        return tuple(sorted(set(found), key=len, reverse=True))

    def redact(self, text: str) -> str:
        """``text`` with every secret, and whatever follows "Bearer", replaced by ***."""
        for secret in self.secrets:
            text = text.replace(secret, MASK)
        return _BEARER.sub(lambda match: f"{match[1]} {MASK}", text)


def shown_url(url: str) -> str:
    """scheme://host[:port]/path: a URL without credentials, query or fragment."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # not a TCP port: shown as written
        port = parts.netloc.rsplit(":", 1)[-1]
    return f"{parts.scheme}://{parts.hostname}{f':{port}' if port else ''}{parts.path.rstrip('/')}"


def api_key() -> str:
    return next((os.environ[name] for name in KEY_VARIABLES if os.environ.get(name)), NO_KEY)


def clients(endpoint: Endpoint):
    """One client per replica; openai's client pools and reuses its connections."""
    import openai

    return [
        openai.OpenAI(
            base_url=base,
            api_key=api_key(),
            timeout=endpoint.timeout,
            max_retries=0,  # retried in _send
            # a redirect is refused, not followed: requests go where --api-base says, and rows name where they went
            http_client=openai.DefaultHttpxClient(follow_redirects=False),
        )
        for base in endpoint.bases
    ]


def what_went_wrong(err: Exception, base: str, endpoint: Endpoint) -> str:
    """One line for an API failure that retries did not cure, never echoing the key."""
    import openai

    base = shown_url(base)
    if isinstance(err, openai.AuthenticationError):
        line = f"{base} refused the API key (401); set NUMPREC_API_KEY (or OPENAI_API_KEY) to a key it accepts"
    elif isinstance(err, openai.PermissionDeniedError):
        line = f"{base} denied access (403) with this API key"
    elif isinstance(err, openai.NotFoundError):
        line = f"{base} has no such model or route (404): check --api-model and --api-base (it ends in /v1)"
    elif isinstance(err, openai.APITimeoutError):
        line = f"{base} did not answer within the timeout, retries spent; raise --api-timeout or --api-retries"
    elif isinstance(err, openai.APIConnectionError):
        line = f"cannot reach {base} (connection failed, retries spent); is the server running?"
    elif isinstance(err, openai.APIStatusError) and 300 <= err.status_code < 400:
        location = err.response.headers.get("location", "")
        elsewhere = shown_url(location) if urlsplit(location).hostname else location.split("?")[0]
        line = (
            f"{base} redirected a request to {elsewhere or 'another address'} ({err.status_code}): numprec sends "
            "requests only to --api-base; give the address it redirects to as --api-base"
        )
    elif isinstance(err, openai.APIStatusError):
        line = f"{base} answered {err.status_code} ({str(err.message).splitlines()[0][:120]}), retries spent"
    else:
        line = f"{base}: {type(err).__name__} ({str(err).splitlines()[0][:120] if str(err) else ''}), retries spent"
    return endpoint.redact(line)


def preflight(endpoint: Endpoint) -> str:
    """Before any cell: every replica answers, accepts the key and serves the model (its model list names it).
    Returns the model id the server reports. Anything else is one line."""
    import openai

    for base, client in zip(endpoint.bases, clients(endpoint), strict=True):
        try:
            served = [model.id for model in client.with_options(max_retries=1, timeout=30).models.list()]
        except openai.OpenAIError as err:
            raise UserError(what_went_wrong(err, base, endpoint)) from None
        if served and endpoint.model not in served:
            names = ", ".join(served[:8]) + (" ..." if len(served) > 8 else "")
            raise UserError(
                endpoint.redact(
                    f"{shown_url(base)} does not serve a model named {endpoint.model!r}; it serves: {names}"
                )
            )
    return endpoint.model


def request_key(request: dict) -> str:
    return hashlib.sha256(json.dumps(request, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:32]


# What a journal entry's digest covers: its request's key and everything the reply said.
REPLY_FIELDS = ("key", "text", "finish_reason", "prompt_tokens", "completion_tokens", "model", "asked", "endpoint")
REPLY_FIELDS += ("reply_chars", "cut")


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


class APIBackend(ChatBackend):
    name = "api"
    footprint_mb = 0.0

    def __init__(
        self,
        endpoint: Endpoint,
        precision: PrecisionSpec,
        tokenizer=None,
        batch_size: int = 256,
        journal: Path | None = None,
    ):
        if endpoint.mode == "completions" and tokenizer is None:
            raise UserError(
                "--api-endpoint completions applies the model's chat template here: give --model a registry model "
                "(or --model-path) with a tokenizer, or use --api-endpoint chat"
            )
        self.endpoint, self.precision, self.tokenizer, self.batch_size = endpoint, precision, tokenizer, batch_size
        self.served_model = preflight(endpoint)
        self._clients = clients(endpoint)
        self._in_flight = [0] * len(self._clients)
        self._pick = threading.Lock()
        self.pacing = AdaptiveLimit(endpoint.concurrency)
        self.journal = Journal(journal)
        self.other_endpoints = check_resume(self.journal, endpoint)
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0}
        # no token is longer than this many characters: a reply is cut to budget x this before it is tokenized
        self._token_chars = max((len(t) for t in tokenizer.get_vocab()), default=64) if tokenizer else 1

    @property
    def repairs(self) -> list[str]:
        return self.journal.repairs

    @property
    def kernel(self) -> str:
        return f"served: {self.served_model} at {self.endpoint.shown()} ({self.endpoint.mode})"

    @property
    def matmul_precision(self) -> str:
        return "the server's (declared, not read)"

    def decoding_note(self, sampling: Sampling) -> str:
        if not sampling.do_sample:
            return "temperature 0, seed per problem"
        top_k = f"top_k {sampling.top_k}" if self.endpoint.takes_top_k else "top_k not applied (the API has none)"
        return f"temperature {sampling.temperature}, top_p {sampling.top_p}, {top_k}, seed per problem"

    def chat_prompt(self, user_message: str) -> str:
        """Completions mode: the model's chat template applied here. Chat mode: the user message, which the server
        wraps in its own template."""
        return super().chat_prompt(user_message) if self.endpoint.mode == "completions" else user_message

    def count_tokens(self, text: str) -> int:
        """Token budgets: the model's tokenizer where there is one; else one token per character, a bound that
        holds for every tokenizer in use (budgets only cap a generation that the first-line stop ends anyway)."""
        return super().count_tokens(text) if self.tokenizer is not None else len(text)

    def request(self, prompt: str, budget: int, sampling: Sampling, seed: int, answer: AnswerMode = FIRST_LINE) -> dict:
        """The request body for one problem, without routing (so that its key names it on every replica): stopped
        where the answer mode asks a server to stop."""
        body = {"model": self.endpoint.model, "max_tokens": budget, "seed": seed % 2**31}
        if answer.server_stop:
            body["stop"] = list(answer.server_stop)
        body["temperature"] = sampling.temperature if sampling.do_sample else 0.0
        if self.endpoint.takes_top_k:
            # No repetition penalty, as in every in-process backend (llama-cpp-python's server defaults to 1.1).
            body["repeat_penalty"] = 1.0
        if sampling.do_sample:
            body["top_p"] = sampling.top_p
            if self.endpoint.takes_top_k:
                body["top_k"] = sampling.top_k
        if self.endpoint.mode == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
            if self.thinking != "auto":  # the server's template's switch (vLLM and SGLang take it so)
                body["chat_template_kwargs"] = {"enable_thinking": self.thinking == "on"}
        else:
            body["prompt"] = prompt
        return body

    def set_thinking(self, thinking: str) -> None:
        """Completions mode: the switch of the template applied here; chat mode: sent to the server's."""
        if self.endpoint.mode == "completions":
            super().set_thinking(thinking)
        else:
            self.thinking = thinking

    def generate_batch(
        self,
        shared,
        rows: slice,
        budgets: list[int],
        sampling: Sampling,
        seeds: list[int],
        answer: AnswerMode = FIRST_LINE,
    ):
        prompts = shared[rows]
        bodies = [self.request(p, b, sampling, s, answer) for p, b, s in zip(prompts, budgets, seeds, strict=True)]
        keys = [request_key(body) for body in bodies]
        todo = [i for i, key in enumerate(keys) if key not in self.journal.done]
        if todo:
            stop = threading.Event()  # set when this batch ends early: its abandoned requests retry no more
            calls = [lambda i=i: self._complete(bodies[i], keys[i], answer, stop) for i in todo]
            run_abandoning(calls, min(self.endpoint.concurrency, len(todo)), stop)
        out = []
        for key in keys:
            record = self.journal.done[key]
            self.usage["prompt_tokens"] += record.get("prompt_tokens", 0)
            self.usage["completion_tokens"] += record.get("completion_tokens", 0)
            tokens = record.get("completion_tokens") or max(1, self.count_tokens(record["text"]))
            out.append(
                Generation(
                    text=record["text"],
                    tokens=tokens,
                    prompt_tokens=record.get("prompt_tokens", 0),
                    model=record.get("model") or "(not reported)",
                    endpoint=record.get("endpoint") or self.endpoint.shown(),
                    cut=bool(record.get("cut")),
                    finished=record.get("finish_reason") != "length",
                )
            )
        return out

    def _complete(self, body: dict, key: str, answer: AnswerMode, stop: threading.Event) -> None:
        """One problem's completion (continued while its first line is still blank), checked, cut to the request's
        budget and first line, and journaled."""
        text, prompt_tokens, completion_tokens, finish, model, where = "", 0, 0, None, None, ""
        request = dict(body)
        while True:
            response, where = self._send(request, stop)
            choice = response.choices[0]
            answered = getattr(response, "model", None)
            if not self.endpoint.accepts(answered):
                raise UserError(
                    self.endpoint.redact(
                        f"{where} answered as model {answered!r}, not the {self.endpoint.model!r} asked for: "
                        f"nothing of it is kept; if the server serves {self.endpoint.model!r} under that id, "
                        f"pass --api-accept-model {answered}"
                    )
                )
            model = answered or model
            piece = choice.text if self.endpoint.mode == "completions" else choice.message.content
            text += piece
            usage = getattr(response, "usage", None)
            prompt_tokens += getattr(usage, "prompt_tokens", 0) or 0
            completion_tokens += getattr(usage, "completion_tokens", 0) or 0
            finish = choice.finish_reason
            budget_left = body["max_tokens"] - completion_tokens
            blank = not text.strip()
            continues = answer.continues_blank and self.endpoint.mode == "completions"
            if not (blank and finish == "stop" and continues and budget_left > 0):
                break
            # The server stopped at a newline before any text: the first non-blank line has not begun. Continue
            # after the newline, as the in-process backends do (their stop rule skips leading blank lines).
            text += "\n"
            request = {**body, "prompt": body["prompt"] + text, "max_tokens": budget_left}
        kept, at_budget = self._cut(text, body["max_tokens"], answer)
        self.journal.add(
            {
                "key": key,
                "text": self.endpoint.redact(kept),
                "finish_reason": "length" if at_budget else finish,
                "prompt_tokens": prompt_tokens,
                "completion_tokens": min(completion_tokens, body["max_tokens"]) if kept != text else completion_tokens,
                "model": model,
                "asked": self.endpoint.model,
                "endpoint": where,
                "reply_chars": len(text),
                "cut": kept != text,
            }
        )

    def _cut(self, text: str, budget: int, answer: AnswerMode) -> tuple[str, bool]:
        """``text`` as an in-process backend would have stopped it: where the answer mode stops (the end of the
        first non-blank line, for the paper's), and at the request's token budget; and whether the budget cut it."""
        text = answer.kept(text)
        if self.tokenizer is None:
            return text[:budget], len(text) > budget
        head = text[: budget * self._token_chars]
        ids = self.tokenizer(head, add_special_tokens=False)["input_ids"]
        if len(ids) <= budget and head == text:
            return text, False
        return self.tokenizer.decode(ids[:budget]), True

    def _send(self, request: dict, stop: threading.Event):
        """One request to the least busy replica, in a slot of the pacing: (the parsed reply, the endpoint that
        answered it). What HTTP says went wrong (408, 409, 429, 5xx, a timeout, a dropped
        connection) and a reply that is not valid JSON, not a completion, or whose text is not text, are retried with
        exponential backoff and jitter, honouring Retry-After; 429, 503 and timeouts also halve the pacing."""
        import openai

        with self._pick:
            replica = min(range(len(self._clients)), key=self._in_flight.__getitem__)
            self._in_flight[replica] += 1
        client, base = self._clients[replica], self.endpoint.bases[replica]
        extra = {name: request[name] for name in ("top_k", "repeat_penalty", "chat_template_kwargs") if name in request}
        body = {name: value for name, value in request.items() if name not in extra}
        create = client.chat.completions if self.endpoint.mode == "chat" else client.completions
        try:
            for attempt in range(self.endpoint.retries + 1):
                if stop.is_set():  # its batch has ended (Ctrl-C, another request failed): ask no more
                    raise UserError("abandoned: the run stopped")
                ticket, outcome, wait = self.pacing.acquire(), "failed", None
                try:
                    response = within_deadline(
                        lambda: create.with_raw_response.create(**body, extra_body=extra or None).parse(),
                        self.endpoint.timeout,
                        stop,
                    )
                    if not getattr(response, "choices", None):
                        raise ValueError("a reply with no choices")
                    choice = response.choices[0]
                    piece = choice.text if self.endpoint.mode == "completions" else choice.message.content
                    if not isinstance(piece, str):
                        raise ValueError(f"a reply whose text is {type(piece).__name__}, not text")
                    outcome = "answered"
                    return response, shown_url(base)  # redirects are refused: where it was sent
                except (openai.APIResponseValidationError, ValueError, TypeError, AttributeError) as err:
                    if attempt == self.endpoint.retries:
                        raise UserError(
                            self.endpoint.redact(
                                f"{shown_url(base)} kept answering with invalid replies ({type(err).__name__}: "
                                f"{str(err).splitlines()[0][:80] if str(err) else ''}), retries spent"
                            )
                        ) from None
                except DeadlineExceeded:
                    if attempt == self.endpoint.retries:
                        raise UserError(
                            f"{shown_url(base)} did not finish a reply within --api-timeout "
                            f"{self.endpoint.timeout:g} s, retries spent; raise --api-timeout or --api-retries; "
                            "finished requests are saved: rerun to resume"
                        ) from None
                    outcome = "pushed back"
                except openai.OpenAIError as err:
                    if not retryable(err) or attempt == self.endpoint.retries:
                        raise UserError(
                            what_went_wrong(err, base, self.endpoint) + "; finished requests are saved: rerun to resume"
                        ) from None
                    outcome = "pushed back" if pushed_back(err) else "failed"
                    wait = retry_after(err)
                finally:
                    self.pacing.release(ticket, outcome)
                time.sleep(wait if wait is not None else min(0.5 * 2**attempt, 8.0) * (1 - 0.25 * random.random()))
        finally:
            with self._pick:
                self._in_flight[replica] -= 1
        raise AssertionError("unreachable")


def retryable(err: Exception) -> bool:
    """What a retry may cure: a timeout, a dropped connection, 408, 409, 429 and 5xx (openai's own rule)."""
    import openai

    if isinstance(err, (openai.APITimeoutError, openai.APIConnectionError)):
        return True
    return isinstance(err, openai.APIStatusError) and (err.status_code in (408, 409, 429) or err.status_code >= 500)


def pushed_back(err: Exception) -> bool:
    """The server says it has too much to do: 429, 503, or no answer in time."""
    import openai

    if isinstance(err, openai.APITimeoutError):
        return True
    return isinstance(err, openai.APIStatusError) and err.status_code in (429, 503)


def retry_after(err: Exception) -> float | None:
    """Seconds a refusal asks to wait (Retry-After, up to a minute), or None."""
    response = getattr(err, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return min(60.0, max(0.0, float(value))) if value is not None else None
    except ValueError:
        return None


def parse_bases(text: str) -> tuple[str, ...]:
    """--api-base URL[,URL...]: http(s) URLs, each once."""
    bases = tuple(part.strip().rstrip("/") for part in text.split(",") if part.strip())
    if not bases:
        raise ValueError("names no URL; give http://host:port/v1 (comma-separated for replicas)")
    for base in bases:
        parts = urlsplit(base)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"{shown_url(base) if parts.hostname else '(the URL)'} is not an http(s) URL like "
                "http://127.0.0.1:8000/v1"
            )
        if parts.username or parts.password:
            raise ValueError("put the API key in NUMPREC_API_KEY, not in the URL (it would be recorded)")
        try:
            parts.port  # noqa: B018  (urllib checks the port when it is read)
        except ValueError:
            raise ValueError(
                f"{parts.scheme}://{parts.hostname}: its port is not a TCP port (1-65535); give one like "
                "http://127.0.0.1:8000/v1"
            ) from None
    if len(set(bases)) < len(bases):
        raise ValueError("names a URL twice")
    return bases
