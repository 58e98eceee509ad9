"""Which failures of a request are tried again, which are the server pushing back, and how long it asks to wait."""

from __future__ import annotations


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
