"""The errors of the producers: one family for the Redis producer and the HTTP clients, so
``except UnknownSource`` reads the same whichever way a hook is committed."""

from __future__ import annotations

from typing import Optional

__all__ = [
    "AnkusaError",
    "BadRequest",
    "CommitError",
    "Forbidden",
    "NotFound",
    "TooLarge",
    "TooLate",
    "Unauthorized",
    "Unavailable",
    "UnknownSource",
]


class AnkusaError(Exception):
    """An error of ankusa. Over HTTP, ``code`` is the API's stable error code
    (``{"error": {"code", "message"}}``) and ``status`` the HTTP status; both are ``None``
    for the Redis producer's own checks."""

    #: Whether trying again later may succeed (with the same idempotency key).
    retryable = False

    def __init__(self, message: str, *, code: Optional[str] = None,
                 status: Optional[int] = None) -> None:
        super().__init__(message)
        #: The error in words.
        self.message = message
        #: The API's error code (``unauthorized``, ``unknown_source``…), if any.
        self.code = code
        #: The HTTP status, if the error came over HTTP.
        self.status = status


class CommitError(AnkusaError):
    """A commit was refused; nothing was written."""


class UnknownSource(CommitError):
    """No source is registered for ``(tenant, source)`` (``ankusa source put``)."""

    def __init__(self, tenant: str, source: str, *, message: Optional[str] = None,
                 status: Optional[int] = None) -> None:
        super().__init__(message or f"unknown source {tenant}/{source}",
                         code="unknown_source", status=status)
        #: The tenant id.
        self.tenant = tenant
        #: The source id.
        self.source = source


class TooLarge(CommitError):
    """A body is larger than the instance's ``commit.max_hook_bytes``."""

    def __init__(self, index: int, size: int, max_bytes: Optional[int], *,
                 message: Optional[str] = None, status: Optional[int] = None) -> None:
        limit = f"the limit of {max_bytes}" if max_bytes is not None else "the limit"
        super().__init__(message or f"hook {index}: body of {size} bytes is over {limit}",
                         code="too_large", status=status)
        #: 0-based index of the hook in the call.
        self.index = index
        #: Its size, bytes.
        self.size = size
        #: The limit, bytes (``None`` when the answer did not say).
        self.max_bytes = max_bytes


class TooLate(CommitError):
    """A hook is scheduled further ahead than the instance's ``commit.max_delay_ms``."""

    def __init__(self, index: int, ahead_ms: int, max_delay_ms: int) -> None:
        super().__init__(f"hook {index} is scheduled {ahead_ms} ms ahead, over "
                         f"commit.max_delay_ms = {max_delay_ms}", code="bad_request")
        #: 0-based index of the hook in the call.
        self.index = index
        #: How far ahead of the Redis clock it was scheduled, ms.
        self.ahead_ms = ahead_ms
        #: The limit, ms.
        self.max_delay_ms = max_delay_ms


class BadRequest(CommitError):
    """A malformed call: a bad tenant or source id, no hooks, a header that cannot be sent
    (or one of the delivery's own, ``webhook-*``, ``ankusa-*``), a bad event type."""

    def __init__(self, message: str, *, code: Optional[str] = "bad_request",
                 status: Optional[int] = None) -> None:
        super().__init__(message, code=code, status=status)


class Unauthorized(AnkusaError):
    """The token is missing, wrong, revoked or expired (HTTP 401)."""


class Forbidden(AnkusaError):
    """The token may not do this: another tenant's source, or a scope it lacks (HTTP 403)."""


class NotFound(AnkusaError):
    """No such endpoint (HTTP 404 other than an unknown source): is the URL a worker's?"""


class Unavailable(AnkusaError):
    """The pipeline cannot take the hook now: Redis does not answer, the worker is starting
    or draining, or the request took too long (HTTP 503, 408). Retryable: try again with the
    same idempotency key (a commit may have happened before the answer was lost)."""

    retryable = True

    def __init__(self, message: str, *, code: Optional[str] = "unavailable",
                 status: Optional[int] = None, retry_after: Optional[float] = None) -> None:
        super().__init__(message, code=code, status=status)
        #: Seconds the worker asked to wait (its ``Retry-After``), when it said.
        self.retry_after = retry_after
