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
loop); a response that is not valid JSON is retried the same way. Every completed response is appended to the run
directory's ``responses.jsonl`` as it arrives (keyed by the request), so a crash, Ctrl-C or kill -9 mid-cell loses
no finished request and a resumed run sends only the missing ones. The API key comes from NUMPREC_API_KEY (or
OPENAI_API_KEY) and is never written anywhere.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from harness.backends import ChatBackend, Generation, Sampling
from harness.errors import UserError
from harness.models import PrecisionSpec

KEY_VARIABLES = ("NUMPREC_API_KEY", "OPENAI_API_KEY")
NO_KEY = "not-needed"  # what local servers without a key receive (the client insists on some string)


@dataclass(frozen=True)
class Endpoint:
    """Where and how requests go: base URLs (replicas), the served model's name, the request mode, and the
    client's limits."""

    bases: tuple[str, ...]
    model: str
    mode: str = "completions"  # or chat
    concurrency: int = 8
    timeout: float = 120.0
    retries: int = 5

    @property
    def takes_top_k(self) -> bool:
        """OpenAI's own API refuses top_k; vLLM, SGLang and llama.cpp's servers take it."""
        return not any(urlsplit(base).hostname == "api.openai.com" for base in self.bases)

    def shown(self) -> str:
        """The endpoint for rows and reports: the base URLs without credentials or query."""
        parts = [urlsplit(base) for base in self.bases]
        return ",".join(f"{p.scheme}://{p.hostname}{f':{p.port}' if p.port else ''}{p.path}" for p in parts)


def api_key() -> str:
    return next((os.environ[name] for name in KEY_VARIABLES if os.environ.get(name)), NO_KEY)


def clients(endpoint: Endpoint):
    """One client per replica; openai's client pools and reuses its connections."""
    import openai

    return [
        openai.OpenAI(base_url=base, api_key=api_key(), timeout=endpoint.timeout, max_retries=endpoint.retries)
        for base in endpoint.bases
    ]


def what_went_wrong(err: Exception, base: str) -> str:
    """One line for an API failure that retries did not cure, never echoing the key."""
    import openai

    if isinstance(err, openai.AuthenticationError):
        return f"{base} refused the API key (401); set NUMPREC_API_KEY (or OPENAI_API_KEY) to a key it accepts"
    if isinstance(err, openai.PermissionDeniedError):
        return f"{base} denied access (403) with this API key"
    if isinstance(err, openai.NotFoundError):
        return f"{base} has no such model or route (404): check --api-model and --api-base (it ends in /v1)"
    if isinstance(err, openai.APITimeoutError):
        return f"{base} did not answer within the timeout, retries spent; raise --api-timeout or --api-retries"
    if isinstance(err, openai.APIConnectionError):
        return f"cannot reach {base} (connection failed, retries spent); is the server running?"
    if isinstance(err, openai.APIStatusError):
        return f"{base} answered {err.status_code} ({str(err.message).splitlines()[0][:120]}), retries spent"
    return f"{base}: {type(err).__name__} ({str(err).splitlines()[0][:120] if str(err) else ''}), retries spent"


def preflight(endpoint: Endpoint) -> str:
    """Before any cell: every replica answers, accepts the key and serves the model (its model list names it).
    Returns the model id the server reports. Anything else is one line."""
    import openai

    for base, client in zip(endpoint.bases, clients(endpoint), strict=True):
        try:
            served = [model.id for model in client.with_options(max_retries=1, timeout=30).models.list()]
        except openai.OpenAIError as err:
            raise UserError(what_went_wrong(err, base)) from None
        if served and endpoint.model not in served:
            names = ", ".join(served[:8]) + (" ..." if len(served) > 8 else "")
            raise UserError(f"{base} does not serve a model named {endpoint.model!r}; it serves: {names}")
    return endpoint.model


class Journal:
    """responses.jsonl: one line per completed request (its key, text, finish reason, token usage, the model id the
    server reported), appended and flushed as each arrives; read back (damaged lines skipped) on resume."""

    def __init__(self, path: Path | None):
        self.path, self.lock, self.done = path, threading.Lock(), {}
        if path is None or not path.exists():
            return
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                record = json.loads(line)
                if isinstance(record, dict) and isinstance(record.get("text"), str) and record.get("key"):
                    self.done[record["key"]] = record
            except ValueError:
                continue  # a line cut by a kill

    def add(self, record: dict) -> None:
        self.done[record["key"]] = record
        if self.path is None:
            return
        with self.lock, open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())


def request_key(request: dict) -> str:
    return hashlib.sha256(json.dumps(request, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:32]


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
        self.journal = Journal(journal)
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0}

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

    def request(self, prompt: str, budget: int, sampling: Sampling, seed: int) -> dict:
        """The request body for one problem, without routing (so that its key names it on every replica)."""
        body = {"model": self.endpoint.model, "max_tokens": budget, "stop": ["\n"], "seed": seed % 2**31}
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
        else:
            body["prompt"] = prompt
        return body

    def generate_batch(self, shared, rows: slice, budgets: list[int], sampling: Sampling, seeds: list[int]):
        prompts = shared[rows]
        bodies = [self.request(p, b, sampling, s) for p, b, s in zip(prompts, budgets, seeds, strict=True)]
        keys = [request_key(body) for body in bodies]
        todo = [i for i, key in enumerate(keys) if key not in self.journal.done]
        if todo:
            pool = ThreadPoolExecutor(max_workers=min(self.endpoint.concurrency, len(todo)))
            stop = threading.Event()
            futures = [pool.submit(self._complete_unless, stop, bodies[i], keys[i]) for i in todo]
            try:
                for future in futures:
                    future.result()
            finally:  # on Ctrl-C or a spent retry: no new requests; those in flight are journaled if they complete
                stop.set()
                pool.shutdown(wait=False, cancel_futures=True)
        out = []
        for key in keys:
            record = self.journal.done[key]
            self.usage["prompt_tokens"] += record.get("prompt_tokens", 0)
            self.usage["completion_tokens"] += record.get("completion_tokens", 0)
            tokens = record.get("completion_tokens") or max(1, self.count_tokens(record["text"]))
            out.append(Generation(text=record["text"], tokens=tokens, prompt_tokens=record.get("prompt_tokens", 0)))
        return out

    def _complete_unless(self, stop: threading.Event, body: dict, key: str) -> None:
        """``_complete`` unless a request has failed for good: the worker that meets the failure says so before it
        takes the next problem (else a queued request would still be sent after the run has stopped)."""
        if stop.is_set():
            return
        try:
            self._complete(body, key)
        except BaseException:
            stop.set()
            raise

    def _complete(self, body: dict, key: str) -> None:
        """One problem's completion (continued while its first line is still blank), journaled when complete."""
        text, prompt_tokens, completion_tokens, finish, model = "", 0, 0, None, self.served_model
        request = dict(body)
        while True:
            response = self._send(request)
            choice = response.choices[0]
            piece = choice.text if self.endpoint.mode == "completions" else (choice.message.content or "")
            text += piece
            usage = getattr(response, "usage", None)
            prompt_tokens += getattr(usage, "prompt_tokens", 0) or 0
            completion_tokens += getattr(usage, "completion_tokens", 0) or 0
            finish, model = choice.finish_reason, getattr(response, "model", None) or model
            budget_left = body["max_tokens"] - completion_tokens
            blank = not text.strip()
            if not (blank and finish == "stop" and self.endpoint.mode == "completions" and budget_left > 0):
                break
            # The server stopped at a newline before any text: the first non-blank line has not begun. Continue
            # after the newline, as the in-process backends do (their stop rule skips leading blank lines).
            text += "\n"
            request = {**body, "prompt": body["prompt"] + text, "max_tokens": budget_left}
        self.journal.add(
            {
                "key": key,
                "text": text,
                "finish_reason": finish,
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "model": model,
            }
        )

    def _send(self, request: dict):
        """One request to the least busy replica. openai's client retries what HTTP can say went wrong; a reply
        that is not valid JSON (or not a completion) is retried here the same way (backoff with jitter)."""
        import openai

        with self._pick:
            replica = min(range(len(self._clients)), key=self._in_flight.__getitem__)
            self._in_flight[replica] += 1
        client, base = self._clients[replica], self.endpoint.bases[replica]
        extra = {name: request[name] for name in ("top_k", "repeat_penalty") if name in request}
        body = {name: value for name, value in request.items() if name not in extra}
        try:
            for attempt in range(self.endpoint.retries + 1):
                try:
                    if self.endpoint.mode == "chat":
                        response = client.chat.completions.create(**body, extra_body=extra or None)
                    else:
                        response = client.completions.create(**body, extra_body=extra or None)
                    if not getattr(response, "choices", None):
                        raise ValueError("a reply with no choices")
                    return response
                except (openai.APIResponseValidationError, ValueError) as err:
                    if attempt == self.endpoint.retries:
                        raise UserError(
                            f"{base} kept answering with invalid JSON ({type(err).__name__}), retries spent"
                        ) from None
                    time.sleep(min(0.5 * 2**attempt, 8.0) * (1 - 0.25 * random.random()))
                except openai.OpenAIError as err:
                    raise UserError(
                        what_went_wrong(err, base) + "; finished requests are saved: rerun to resume"
                    ) from None
        finally:
            with self._pick:
                self._in_flight[replica] -= 1
        raise AssertionError("unreachable")


def parse_bases(text: str) -> tuple[str, ...]:
    """--api-base URL[,URL...]: http(s) URLs, each once."""
    bases = tuple(part.strip().rstrip("/") for part in text.split(",") if part.strip())
    if not bases:
        raise ValueError("names no URL; give http://host:port/v1 (comma-separated for replicas)")
    for base in bases:
        parts = urlsplit(base)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{base!r} is not an http(s) URL like http://127.0.0.1:8000/v1")
        if parts.username or parts.password:
            raise ValueError("put the API key in NUMPREC_API_KEY, not in the URL (it would be recorded)")
    if len(set(bases)) < len(bases):
        raise ValueError("names a URL twice")
    return bases
