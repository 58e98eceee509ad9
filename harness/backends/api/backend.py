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

import random
import threading
import time
from pathlib import Path

from harness.backends import ChatBackend, Generation, LoadRequest, Sampling
from harness.backends.abandon import DeadlineExceeded, run_abandoning, within_deadline
from harness.backends.api.endpoint import (
    Endpoint,
    clients,
    preflight,
    shown_url,
    what_went_wrong,
)
from harness.backends.api.journal import Journal, check_resume, request_key
from harness.backends.api.retries import pushed_back, retry_after, retryable
from harness.backends.pacing import AdaptiveLimit
from harness.core.errors import UserError
from harness.models import PrecisionSpec
from harness.questions.answers import FIRST_LINE, AnswerMode


class APIBackend(ChatBackend):
    @classmethod
    def load(cls, request: LoadRequest) -> APIBackend:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(request.weights) if request.weights else None
        return cls(request.endpoint, request.precision, tokenizer, request.batch_size, request.journal)

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
