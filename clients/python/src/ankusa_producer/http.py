"""Commit hooks over HTTP: ankusa's ingest endpoint, ``POST /v1/hooks/{tenant}/{source}``.

The ingest endpoint is served by every ``ankusa worker`` (``admin.listen``). It needs no Redis
access: a producer holds a token that lets it commit, nothing more (a tenant token with the
``ingest`` scope, or the instance's ``admin.ingest_token``), sent as
``Authorization: Bearer <token>``.

Example::

    from ankusa_producer import IngestClient, Unavailable

    with IngestClient("http://127.0.0.1:9187", token="...") as client:
        committed = client.commit("acme", "orders", {"order": {"id": 42}},
                                  event_type="order.created", idempotency_key="order-42-created")
        print(committed.hook_id, committed.rows)

The asynchronous client, :class:`AsyncIngestClient`, has the same methods as coroutines.
"""

from __future__ import annotations

import email.utils
import json
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Dict, Mapping, Optional, Union

import httpx

from .errors import (
    AnkusaError,
    BadRequest,
    Forbidden,
    NotFound,
    TooLarge,
    Unauthorized,
    Unavailable,
    UnknownSource,
)

__all__ = ["AsyncIngestClient", "Body", "Committed", "IngestClient"]

#: What a body may be: ``bytes`` as they are, a ``str`` as its UTF-8 bytes, anything else
#: JSON-encoded (a ``dict``, a ``list``, a number…) with ``content-type: application/json``.
Body = Union[bytes, bytearray, memoryview, str, Mapping[str, Any], list, int, float, bool, None]

#: The default time limit of one request, seconds (connect, send, wait, read).
DEFAULT_TIMEOUT = 30.0


@dataclass(frozen=True)
class Committed:
    """What the ingest endpoint answered for a committed hook (``202``)."""

    #: The hook's id (a retry with the same idempotency key answers the first id).
    hook_id: int
    #: Rows made: one per sink entry of the source that takes the hook (0: it goes nowhere).
    rows: int
    #: Set when ``rows`` is 0: why the hook goes nowhere (no sinks, or every filter refused it).
    warning: Optional[str] = None
    #: For a scheduled hook (``deliver_at``, ``delay``): when it is due, ms since the epoch
    #: (the worker's Redis clock); ``None`` for a hook due at once.
    deliver_at_ms: Optional[int] = None


def _encode(body: Body, headers: Dict[str, str]) -> bytes:
    """The request body; an object encoded as JSON gets ``content-type: application/json``
    unless the caller gave one."""
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    if isinstance(body, str):
        return body.encode("utf-8")
    headers.setdefault("content-type", "application/json")
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _request(
    token: Optional[str],
    body: Body,
    headers: Optional[Mapping[str, str]],
    event_type: Optional[str],
    idempotency_key: Optional[str],
    event_type_header: str,
    deliver_at: "Optional[Union[datetime, int]]" = None,
    delay: "Optional[Union[timedelta, int]]" = None,
) -> "tuple[bytes, Dict[str, str]]":
    """The body and headers of one ingest request."""
    h: Dict[str, str] = {}
    for k, v in (headers or {}).items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise BadRequest(f"header {k!r}: names and values must be strings")
        h[k.lower()] = v
    content = _encode(body, h)
    if token:
        h["authorization"] = f"Bearer {token}"
    if event_type is not None:
        h[event_type_header] = event_type
    if idempotency_key is not None:
        h["idempotency-key"] = idempotency_key
    if deliver_at is not None and delay is not None:
        raise BadRequest("give deliver_at or delay, not both")
    if deliver_at is not None:
        if isinstance(deliver_at, datetime):
            if deliver_at.tzinfo is None:
                raise BadRequest("deliver_at: a datetime needs its timezone (tzinfo)")
            h["ankusa-deliver-at"] = deliver_at.isoformat()
        elif isinstance(deliver_at, int) and not isinstance(deliver_at, bool) and deliver_at >= 0:
            h["ankusa-deliver-at"] = str(deliver_at)
        else:
            raise BadRequest("deliver_at: a timezone-aware datetime or ms since the epoch (int)")
    if delay is not None:
        if isinstance(delay, timedelta):
            ms = int(delay / timedelta(milliseconds=1))
        elif isinstance(delay, int) and not isinstance(delay, bool):
            ms = delay
        else:
            raise BadRequest("delay: a timedelta or ms (int)")
        if ms < 0:
            raise BadRequest("delay: must be 0 or more")
        h["ankusa-delay"] = str(ms)
    return content, h


def _retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds to wait from a ``Retry-After`` header (seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _answer(response: httpx.Response, tenant: str, source: str, size: int) -> Committed:
    """A ``202`` as :class:`Committed`; anything else as its typed error."""
    if response.status_code == 202:
        v = response.json()
        at = v.get("deliver_at_ms")
        return Committed(int(v["hook_id"]), int(v["rows"]), v.get("warning"),
                         int(at) if at is not None else None)
    try:
        error = response.json().get("error") or {}
    except ValueError:
        error = {}
    code = str(error.get("code") or "")
    message = str(error.get("message") or response.reason_phrase or "")
    status = response.status_code
    if status == 401 or code == "unauthorized":
        raise Unauthorized(message, code=code or "unauthorized", status=status)
    if status == 403 or code == "forbidden":
        raise Forbidden(message, code=code or "forbidden", status=status)
    if code == "unknown_source":
        raise UnknownSource(tenant, source, message=message, status=status)
    if status == 413 or code == "too_large":
        raise TooLarge(0, size, None, message=message, status=status)
    if status in (408, 429, 502, 503, 504) or code in ("unavailable", "timeout"):
        raise Unavailable(
            message,
            code=code or "unavailable",
            status=status,
            retry_after=_retry_after(response.headers.get("retry-after")),
        )
    if status == 404:
        raise NotFound(message, code=code or "not_found", status=status)
    if status == 400 or code == "bad_request":
        raise BadRequest(message, code=code or "bad_request", status=status)
    raise AnkusaError(message or f"HTTP {status}", code=code or "failed", status=status)


def _url(base_url: str, tenant: str, source: str) -> str:
    for what, value in (("tenant", tenant), ("source", source)):
        if not isinstance(value, str) or not value or "/" in value:
            raise BadRequest(f"{what} id {value!r}: must be a non-empty str without '/'")
    return f"{base_url.rstrip('/')}/v1/hooks/{tenant}/{source}"


class IngestClient:
    """Commits hooks through a worker's ingest endpoint, synchronously (on ``httpx``).

    ``base_url`` is a worker's admin address (``http://host:9187``; behind a load balancer,
    any worker of the pool). ``token`` is a tenant token with the ``ingest`` scope, or the
    instance's ``admin.ingest_token`` (``None`` when ingest is open: a worker on loopback
    without tokens). ``timeout`` bounds each request, seconds. Pass ``client`` to reuse an
    ``httpx.Client`` of your own (proxies, TLS settings); it is not closed by :meth:`close`.
    ``event_type_header`` must be one of the worker's ``admin.event_type_headers``.
    """

    def __init__(
        self,
        base_url: str,
        token: Optional[str] = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        client: Optional[httpx.Client] = None,
        event_type_header: str = "x-event-type",
    ) -> None:
        self._base = base_url
        self._token = token
        self._own = client is None
        self._client = client if client is not None else httpx.Client(timeout=timeout)
        self._event_header = event_type_header.lower()

    def commit(
        self,
        tenant: str,
        source: str,
        body: Body,
        *,
        headers: Optional[Mapping[str, str]] = None,
        event_type: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        deliver_at: Optional[Union[datetime, int]] = None,
        delay: Optional[Union[timedelta, int]] = None,
    ) -> Committed:
        """Commit one hook to ``(tenant, source)``: ``body`` as bytes, a ``str`` as UTF-8,
        anything else (a ``dict``…) as JSON. ``headers`` reach the receiver (``content-type``,
        ``user-agent`` and your ``x-*`` headers; see the ingest rules of ankusa's
        ``docs/operations.md``). ``event_type`` is what the source's event filters match.
        With ``idempotency_key``, a retry within the worker's ``commit.idempotency_ms``
        answers the first hook's id and commits nothing new: retry :class:`Unavailable`
        errors with the same key. ``deliver_at`` (a timezone-aware ``datetime`` or ms since
        the epoch) or ``delay`` (a ``timedelta`` or ms) schedules the hook: it is delivered
        then, not before (sent as the ``Ankusa-Deliver-At`` / ``Ankusa-Delay`` header; beyond
        the worker's ``commit.max_delay_ms`` it is :class:`BadRequest`).

        Raises :class:`Unauthorized`, :class:`Forbidden`, :class:`UnknownSource`,
        :class:`TooLarge`, :class:`BadRequest` (nothing committed), :class:`Unavailable`
        (retryable; ``retry_after`` seconds when the worker said) or another
        :class:`AnkusaError`; ``httpx`` errors when the worker cannot be reached (the hook
        may or may not be committed: retry with the same idempotency key).
        """
        content, h = _request(self._token, body, headers, event_type, idempotency_key,
                              self._event_header, deliver_at, delay)
        r = self._client.post(_url(self._base, tenant, source), content=content, headers=h)
        return _answer(r, tenant, source, len(content))

    def close(self) -> None:
        """Close the HTTP connections (not those of a ``client`` passed in)."""
        if self._own:
            self._client.close()

    def __enter__(self) -> "IngestClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncIngestClient:
    """:class:`IngestClient` for ``asyncio``: the same arguments, ``await client.commit(…)``,
    ``async with``; ``client`` is an ``httpx.AsyncClient``."""

    def __init__(
        self,
        base_url: str,
        token: Optional[str] = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        client: Optional[httpx.AsyncClient] = None,
        event_type_header: str = "x-event-type",
    ) -> None:
        self._base = base_url
        self._token = token
        self._own = client is None
        self._client = client if client is not None else httpx.AsyncClient(timeout=timeout)
        self._event_header = event_type_header.lower()

    async def commit(
        self,
        tenant: str,
        source: str,
        body: Body,
        *,
        headers: Optional[Mapping[str, str]] = None,
        event_type: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        deliver_at: Optional[Union[datetime, int]] = None,
        delay: Optional[Union[timedelta, int]] = None,
    ) -> Committed:
        """See :meth:`IngestClient.commit`."""
        content, h = _request(self._token, body, headers, event_type, idempotency_key,
                              self._event_header, deliver_at, delay)
        r = await self._client.post(_url(self._base, tenant, source), content=content, headers=h)
        return _answer(r, tenant, source, len(content))

    async def aclose(self) -> None:
        """Close the HTTP connections (not those of a ``client`` passed in)."""
        if self._own:
            await self._client.aclose()

    async def __aenter__(self) -> "AsyncIngestClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
