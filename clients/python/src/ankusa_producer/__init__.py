"""Commit hooks to an ankusa pipeline from Python.

A hook is committed with one atomic call of ankusa's commit script (``lua/prelude.lua`` +
``lua/commit.lua``, exactly what the Rust producer loads; ``ankusa commit-script`` prints it
and ``ankusa commit-script --sha`` its SHA-1). The hook is stored once in Redis and one
delivery row is made per sink entry of its source; the workers deliver it. Nothing is
written when the call is refused (unknown source, body too large, bad ids).

Two ways in:

- :class:`IngestClient` and :class:`AsyncIngestClient` commit over HTTP, through a worker's
  ingest endpoint, with a token that can do nothing but commit: what a producer outside the
  operator's network should use.
- :class:`Producer` commits straight into Redis with the commit script: for producers the
  operator trusts with write access to the instance's Redis.

Example::

    from ankusa_producer import IngestClient

    with IngestClient("http://127.0.0.1:9187", token="...") as client:
        committed = client.commit("acme", "orders", {"id": 1}, event_type="order.created")
        print(committed.hook_id, committed.rows)

    import redis
    from ankusa_producer import Producer

    producer = Producer(redis.Redis.from_url("redis://127.0.0.1:6379"), instance="default")
    receipt = producer.commit("acme", "orders", {"id": 2})
    print(receipt.first_hook, receipt.rows_per_hook)

The protocol is documented in ``docs/commit-protocol.md`` of the ankusa repository.
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from importlib import resources
from typing import TYPE_CHECKING, Any, List, Mapping, Optional, Sequence, Union

from .errors import (
    AnkusaError,
    BadRequest,
    CommitError,
    Forbidden,
    NotFound,
    TooLarge,
    TooLate,
    Unauthorized,
    Unavailable,
    UnknownSource,
)
from .http import AsyncIngestClient, Committed, IngestClient

if TYPE_CHECKING:  # pragma: no cover
    import redis

__version__ = "0.2.0"

__all__ = [
    "AnkusaError",
    "AsyncIngestClient",
    "BadRequest",
    "CommitError",
    "CommitReceipt",
    "Committed",
    "DEFAULT_IDEMPOTENCY_MS",
    "DEFAULT_MAX_HOOK_BYTES",
    "Forbidden",
    "Hook",
    "IngestClient",
    "NotFound",
    "Producer",
    "TooLarge",
    "TooLate",
    "Unauthorized",
    "Unavailable",
    "UnknownSource",
    "commit_script",
    "partition_of",
]

#: ``commit.max_hook_bytes`` of ankusa's default config: the largest body, in bytes (10 MiB).
DEFAULT_MAX_HOOK_BYTES = 10 * 1024 * 1024

#: ``commit.idempotency_ms`` of ankusa's default config: how long an idempotency key is
#: remembered, ms (24 h).
DEFAULT_IDEMPOTENCY_MS = 24 * 60 * 60 * 1000
#: The longest idempotency key the commit script takes, bytes.
_MAX_IDEMPOTENCY_KEY_BYTES = 256

#: Tenant and source ids: 1 to 128 of ``A-Z a-z 0-9 _ . -``.
_ID = re.compile(r"[A-Za-z0-9_.-]{1,128}\Z")
#: Instance names: 1 to 64 of ``a-z 0-9 _ -`` (the config's ``instance``).
_INSTANCE = re.compile(r"[a-z0-9_-]{1,64}\Z")
#: Header names: HTTP tokens (RFC 9110 ``tchar``).
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")
#: Header values: visible ASCII, spaces and tabs (what the HTTP sink can send).
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*\Z")
#: Event types: 1 to 128 of ``A-Z a-z 0-9 _ . : / -``.
_EVENT_TYPE = re.compile(r"[A-Za-z0-9_.:/-]{1,128}\Z")


def partition_of(tenant: str, partitions: int) -> int:
    """The partition a tenant lives in: CRC-32 (IEEE, ``zlib.crc32``) of its id's UTF-8
    bytes modulo the instance's ``partitions`` (the config key; 1 by default), exactly as
    ankusa computes it (``docs/commit-protocol.md``)."""
    if partitions <= 1:
        return 0
    return zlib.crc32(tenant.encode("utf-8")) % partitions


def _deliver_at_ms(at: Optional[Union[datetime, int]]) -> str:
    """``deliver_at`` as ms since the epoch, as text ('' for none)."""
    if at is None:
        return ""
    if isinstance(at, datetime):
        if at.tzinfo is None:
            raise BadRequest("deliver_at: a datetime needs its timezone (tzinfo)")
        ms = int((at - datetime(1970, 1, 1, tzinfo=timezone.utc)) / timedelta(milliseconds=1))
    elif isinstance(at, int) and not isinstance(at, bool):
        ms = at
    else:
        raise BadRequest("deliver_at: a timezone-aware datetime or ms since the epoch (int)")
    if not 0 <= ms < 2 ** 53:
        raise BadRequest("deliver_at: must be after the epoch and below 2^53 ms")
    return str(ms)


def _delay_ms(delay: Optional[Union[timedelta, int]]) -> str:
    """``delay`` as ms, as text ('' for none)."""
    if delay is None:
        return ""
    if isinstance(delay, timedelta):
        ms = int(delay / timedelta(milliseconds=1))
    elif isinstance(delay, int) and not isinstance(delay, bool):
        ms = delay
    else:
        raise BadRequest("delay: a timedelta or ms (int)")
    if not 0 <= ms < 2 ** 53:
        raise BadRequest("delay: must be 0 or more and below 2^53 ms")
    return str(ms)


def commit_script() -> str:
    """The commit script (prelude + commit) this package ships, byte for byte what
    ``ankusa commit-script`` prints (the ankusa test suite checks they are equal)."""
    return resources.files(__package__).joinpath("commit.lua").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Hook:
    """One hook: a body and the headers sent with every delivery of it (names are HTTP
    tokens, values strings without control characters). The body is ``bytes`` as they are,
    a ``str`` as its UTF-8 bytes, or anything else (a ``dict``, a ``list``…) as JSON, with
    ``content-type: application/json`` unless the headers give one."""

    body: Any
    headers: Mapping[str, str] = field(default_factory=dict)
    #: The event type (``push``, ``pull_request.opened``) the sink entries' event filters
    #: match; ``None``: only entries without a filter take the hook.
    event_type: Optional[str] = None
    #: The producer's idempotency key (at most 256 bytes, e.g. the upstream event's id): a
    #: hook whose key was committed to the same tenant and source within the producer's
    #: ``idempotency_ms`` is not written again, so a retry after a lost reply commits once.
    idempotency_key: Optional[str] = None
    #: Deliver the hook at this time, not before: a timezone-aware ``datetime`` or ms since
    #: the Unix epoch (``int``). A time past is delivered at once; one further ahead than the
    #: instance's ``commit.max_delay_ms`` (30 days by default) raises :class:`TooLate`.
    deliver_at: Optional[Union[datetime, int]] = None
    #: Deliver the hook this long after the commit (by the Redis clock), not before: a
    #: ``timedelta`` or ms (``int``). Give ``deliver_at`` or ``delay``, not both.
    delay: Optional[Union[timedelta, int]] = None

    def _schedule(self) -> "tuple[str, str]":
        """The commit script's ``deliver_at`` and ``delay`` values of this hook ('' none)."""
        if self.deliver_at is not None and self.delay is not None:
            raise BadRequest("give deliver_at or delay, not both")
        return _deliver_at_ms(self.deliver_at), _delay_ms(self.delay)

    def _json(self) -> bool:
        return not isinstance(self.body, (bytes, bytearray, memoryview, str))

    def _body_bytes(self) -> bytes:
        if isinstance(self.body, str):
            return self.body.encode("utf-8")
        if isinstance(self.body, (bytes, bytearray, memoryview)):
            return bytes(self.body)
        try:
            return json.dumps(self.body, separators=(",", ":"), ensure_ascii=False).encode()
        except (TypeError, ValueError) as e:
            raise BadRequest(f"body: not bytes, str or JSON-encodable: {e}") from None

    def _headers_json(self) -> str:
        headers = dict(self.headers)
        if self._json() and not any(k.lower() == "content-type" for k in headers):
            headers["content-type"] = "application/json"
        if not headers:
            return ""
        for k, v in headers.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise BadRequest(f"header {k!r}: names and values must be strings")
            # Checked here: the commit script stores what it is given, and a header HTTP
            # cannot carry would dead-letter the hook at its first attempt.
            if not _HEADER_NAME.match(k):
                raise BadRequest(f"header name {k!r}: not an HTTP token")
            if not _HEADER_VALUE.match(v):
                raise BadRequest(f"header {k!r}: its value must be visible ASCII, spaces and tabs")
        return json.dumps(headers, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class CommitReceipt:
    """What a commit made."""

    #: Id of the first hook; the call's hooks have consecutive ids.
    first_hook: int
    #: Rows made per hook: the sink entries of the source at commit (0: it has no sinks).
    rows_per_hook: int
    #: Commit time, ms since the epoch, by the Redis clock.
    committed_at_ms: int
    #: Hooks committed by the call.
    count: int = 1
    #: Hooks of the call that no sink entry took (every filter refused them, or the
    #: entries are disabled): not stored, not an error.
    unmatched: int = 0
    #: Rows made for each hook, when the call gave event types (else every hook got
    #: ``rows_per_hook``).
    rows: Optional[List[int]] = None
    #: Each hook's id, when the call gave idempotency keys: a hook whose key was seen
    #: already answers the id committed then (ids are not consecutive then).
    ids: Optional[List[int]] = None

    @property
    def hook_ids(self) -> List[int]:
        """The ids of the call's hooks, in order."""
        if self.ids is not None:
            return list(self.ids)
        return list(range(self.first_hook, self.first_hook + self.count))


class Producer:
    """Commits hooks to one ankusa instance through a redis-py client.

    ``client`` is a ``redis.Redis`` (any connection options: TLS, a password, a unix socket).
    ``instance`` is the pipeline's instance name (the config's ``instance``, default
    ``"default"``).

    ``partitions`` and ``max_hook_bytes`` are read from Redis at the first commit when not
    given: the partition count the instance recorded at its first start
    (``ankusa:{<instance>}:partitions``; 1 when none is recorded yet) and the
    ``commit.max_hook_bytes`` its leader keeps in the partition's ``settings`` (10 MiB until a
    leader wrote it). Each commit goes to its tenant's partition (:func:`partition_of`). A
    ``partitions`` given that differs from the recorded one is refused (:class:`BadRequest`):
    rows written there would never be claimed. A ``max_hook_bytes`` given is checked here
    before sending; the commit script enforces the leader's limit itself, so it can only
    lower the limit, never raise it.
    ``idempotency_ms`` is how long a hook's idempotency key is remembered (ankusa's
    ``commit.idempotency_ms``, default 24 h), > 0.
    ``script`` overrides the shipped commit script (e.g. the output of ``ankusa
    commit-script`` of the binary you run). The script is called by SHA and loaded again
    when Redis answers ``NOSCRIPT`` (a restart, a failover).
    ``commit_wait_ms`` is how long a commit waits for every replica attached to the primary
    to acknowledge it (``WAIT``, as ankusa's ``redis.commit_wait_ms``, default 1000); a
    commit they did not all acknowledge raises :class:`Unavailable` (retryable) instead of
    returning, so a failover cannot lose a commit this producer returned. 0 returns as soon
    as the primary has it.
    """

    def __init__(
        self,
        client: "redis.Redis",
        instance: str = "default",
        max_hook_bytes: Optional[int] = None,
        script: Optional[str] = None,
        partitions: Optional[int] = None,
        idempotency_ms: int = DEFAULT_IDEMPOTENCY_MS,
        commit_wait_ms: int = 1000,
    ) -> None:
        if not _INSTANCE.match(instance):
            raise BadRequest(f"instance {instance!r}: must match [a-z0-9_-]{{1,64}}")
        if partitions is not None and not 1 <= partitions <= 1024:
            raise BadRequest("partitions must be in 1..=1024")
        if max_hook_bytes is not None and max_hook_bytes <= 0:
            raise BadRequest("max_hook_bytes must be > 0")
        if idempotency_ms <= 0:
            raise BadRequest("idempotency_ms must be > 0")
        if not 0 <= commit_wait_ms <= 60000:
            raise BadRequest("commit_wait_ms must be in 0..=60000")
        self._wait_ms = commit_wait_ms
        # Replicas the last commit found attached: how many the next one's WAIT asks for.
        self._replicas: Optional[int] = None
        self._idem_ms = idempotency_ms
        self._read = False
        self._client = client
        self._instance = instance
        self._partitions = partitions
        self._max = max_hook_bytes
        self._script = client.register_script(script if script is not None else commit_script())

    def _settings(self) -> None:
        """Read what the instance recorded in Redis, once: its partition count and its
        leader's ``commit.max_hook_bytes``."""
        if self._read:
            return
        recorded = self._client.get(f"ankusa:{{{self._instance}}}:partitions")
        count = int(recorded) if recorded is not None else 1
        if self._partitions is not None and recorded is not None and self._partitions != count:
            raise BadRequest(
                f"partitions={self._partitions}, but instance {self._instance!r} records "
                f"{count} (ankusa:{{{self._instance}}}:partitions): leave partitions out to "
                "use the recorded count")
        if self._partitions is None:
            self._partitions = count
        if self._max is None:
            limit = self._client.hget(f"ankusa:{{{self._instance}.p0}}:settings",
                                      "max_hook_bytes")
            self._max = int(limit) if limit is not None else DEFAULT_MAX_HOOK_BYTES
        self._read = True

    @property
    def partitions(self) -> int:
        """The instance's partition count (read from Redis at the first use when not given)."""
        self._settings()
        assert self._partitions is not None
        return self._partitions

    @property
    def max_hook_bytes(self) -> int:
        """The largest body this producer sends, bytes (the leader's ``commit.max_hook_bytes``
        read from Redis when not given)."""
        self._settings()
        assert self._max is not None
        return self._max

    @property
    def sha(self) -> str:
        """SHA-1 of the commit script, as ``ankusa commit-script --sha`` prints it."""
        return str(self._script.sha)

    def commit(
        self,
        tenant: str,
        source: str,
        body: Any,
        headers: Optional[Mapping[str, str]] = None,
        event_type: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        deliver_at: Optional[Union[datetime, int]] = None,
        delay: Optional[Union[timedelta, int]] = None,
    ) -> CommitReceipt:
        """Commit one hook to ``(tenant, source)``; with ``deliver_at`` or ``delay`` it is
        delivered then, not before (see :class:`Hook`). Raises :class:`CommitError` (nothing
        written) or a redis-py error (Redis unreachable: the hook may or may not be
        committed if the reply was lost; retry with the same ``idempotency_key`` and it is
        committed once)."""
        hook = Hook(body, dict(headers or {}), event_type, idempotency_key, deliver_at, delay)
        return self.commit_many(tenant, source, [hook])

    def commit_many(self, tenant: str, source: str, hooks: Sequence[Hook]) -> CommitReceipt:
        """Commit several hooks in one atomic call: all or none; their ids are consecutive."""
        for what, value in (("tenant", tenant), ("source", source)):
            if not isinstance(value, str) or not _ID.match(value):
                raise BadRequest(f"{what} id {value!r}: must match [A-Za-z0-9_.-]{{1,128}}")
        if not hooks:
            raise BadRequest("no hooks")
        # The tenant's partition: its keys share the hash tag {<instance>.p<N>}.
        prefix = f"ankusa:{{{self._instance}.p{partition_of(tenant, self.partitions)}}}:"
        limit = self.max_hook_bytes
        args: List[Union[bytes, str, int]] = [prefix, tenant, source, limit, len(hooks)]
        for i, h in enumerate(hooks):
            body = h._body_bytes()
            if len(body) > limit:
                raise TooLarge(i, len(body), limit)
            args += [body, h._headers_json()]
        events = any(h.event_type is not None for h in hooks)
        if events:
            args.append("events")
            for h in hooks:
                et = h.event_type or ""
                if et and not _EVENT_TYPE.match(et):
                    raise BadRequest(f"event type {et!r}: must be 1..=128 bytes of [A-Za-z0-9_.:/-]")
                args.append(et)
        schedules = [h._schedule() for h in hooks]
        for word, k in (("deliver_at", 0), ("delay", 1)):
            if any(sc[k] for sc in schedules):
                args.append(word)
                args += [sc[k] for sc in schedules]
        keyed = any(h.idempotency_key is not None for h in hooks)
        if keyed:
            args += ["idem", self._idem_ms]
            for h in hooks:
                k = h.idempotency_key or ""
                if not isinstance(k, str) or len(k.encode("utf-8")) > _MAX_IDEMPOTENCY_KEY_BYTES:
                    raise BadRequest(f"idempotency key {k!r}: must be a str of at most "
                                     f"{_MAX_IDEMPOTENCY_KEY_BYTES} bytes")
                args.append(k)
        if self._replicas is None:
            info = self._client.info("replication")
            self._replicas = int(info.get("connected_slaves", 0)) if isinstance(info, dict) else 0
        # The script and its WAIT on one connection (WAIT counts that connection's writes):
        # a commit not every attached replica acknowledged is not returned as committed.
        pipe = self._client.pipeline(transaction=False)
        self._script(keys=[prefix + "lease"], args=args, client=pipe)
        waiting = self._wait_ms > 0 and self._replicas > 0
        if waiting:
            pipe.execute_command("WAIT", self._replicas, self._wait_ms)
        answers = pipe.execute(raise_on_error=True)
        reply = answers[0]
        status = _text(reply[0]) if reply else ""
        if status == "not_primary":
            # A master the sentinels no longer name (an ankusa worker marked it deposed): its
            # writes will be thrown away. Drop this pool's connections, so a sentinel-managed
            # pool asks the sentinels for the primary on the next commit.
            self._replicas = None
            pool = getattr(self._client, "connection_pool", None)
            if pool is not None:
                pool.disconnect()
            raise Unavailable(f"not the primary: this Redis server is a master the sentinels "
                              f"no longer name (they name {_text(reply[1])}); nothing was "
                              "written; retry",
                              code="not_primary")
        if status == "replica_lost":
            self._replicas = None
            raise Unavailable("not replicated: the Redis primary has fewer replicas attached "
                              "than wanted (a failover under way, or a replica not synced "
                              "yet?); nothing was written; retry",
                              code="not_replicated")
        if status == "ok":
            n = len(hooks)
            expected = 4 + (2 * n if events else n if keyed else 0)
            if len(reply) == expected + 1:
                # The replicas attached when the commit ran, last (docs/commit-protocol.md).
                attached = int(reply[-1])
                reply = reply[:-1]
                acked = int(answers[1]) if waiting else 0
                self._replicas = attached
                if self._wait_ms > 0 and acked < attached:
                    raise Unavailable(
                        f"not replicated: {acked} of the {attached} attached replicas "
                        "acknowledged the commit in time, so a failover could lose it; retry "
                        "(with the same idempotency key it is not committed twice)",
                        code="not_replicated")
            # ['ok', first, rows of hook 1, now] then, with idem or events, n ids, then,
            # with events, n row counts.
            ids = [int(i) for i in reply[4 : 4 + n]] if keyed else None
            if events:
                rows = [int(r) for r in reply[4 + n : 4 + 2 * n]]
                return CommitReceipt(int(reply[1]), int(reply[2]), int(reply[3]), n,
                                     sum(1 for r in rows if r == 0), rows, ids)
            rows_per_hook = int(reply[2])
            return CommitReceipt(int(reply[1]), rows_per_hook, int(reply[3]), n,
                                 n if rows_per_hook == 0 else 0, None, ids)
        if status == "unknown_source":
            raise UnknownSource(tenant, source)
        if status == "too_large":
            raise TooLarge(int(reply[1]) - 1, int(reply[2]),
                           int(reply[3]) if len(reply) > 3 else limit)
        if status == "bad_request":
            raise BadRequest(_text(reply[1]) if len(reply) > 1 else "bad request")
        if status == "too_late" and len(reply) > 3:
            raise TooLate(int(reply[1]) - 1, int(reply[2]), int(reply[3]))
        if status == "reserved_header" and len(reply) > 2:
            raise BadRequest(f"hook {int(reply[1]) - 1}: header {_text(reply[2])!r} is reserved "
                             "(names starting with webhook- or ankusa- are the delivery's own)")
        raise CommitError(f"unexpected reply from the commit script: {reply!r}")


def _text(v: object) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
