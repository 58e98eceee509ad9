"""Where a served model is: its base URLs, key, accepted model ids and request mode, the clients that reach it,
the preflight request that checks it, and errors said in one line with every secret masked."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from harness.core.errors import UserError

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
