"""Commit hooks to an ankusa pipeline from Python.

A hook is committed with one atomic call of ankusa's commit script (``lua/prelude.lua`` +
``lua/commit.lua``, exactly what the Rust producer loads; ``ankusa commit-script`` prints it
and ``ankusa commit-script --sha`` its SHA-1). The hook is stored once in Redis and one
delivery row is made per sink entry of its source; the workers deliver it. Nothing is
written when the call is refused (unknown source, body too large, bad ids).

Example::

    import redis
    from ankusa_producer import Producer

    producer = Producer(redis.Redis.from_url("redis://127.0.0.1:6379"), instance="default")
    receipt = producer.commit("acme", "orders", b'{"id": 1}',
                              headers={"content-type": "application/json"})
    print(receipt.first_hook, receipt.rows_per_hook)

The protocol is documented in ``docs/commit-protocol.md`` of the ankusa repository.
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, List, Mapping, Optional, Sequence, Union

if TYPE_CHECKING:  # pragma: no cover
    import redis

__all__ = [
    "BadRequest",
    "CommitError",
    "CommitReceipt",
    "DEFAULT_IDEMPOTENCY_MS",
    "DEFAULT_MAX_HOOK_BYTES",
    "Hook",
    "Producer",
    "TooLarge",
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


def commit_script() -> str:
    """The commit script (prelude + commit) this package ships, byte for byte what
    ``ankusa commit-script`` prints (the ankusa test suite checks they are equal)."""
    return resources.files(__package__).joinpath("commit.lua").read_text(encoding="utf-8")


class CommitError(Exception):
    """A commit was refused; nothing was written."""


class UnknownSource(CommitError):
    """No source is registered for ``(tenant, source)`` (``ankusa source put``)."""

    def __init__(self, tenant: str, source: str) -> None:
        super().__init__(f"unknown source {tenant}/{source}")
        #: The tenant id.
        self.tenant = tenant
        #: The source id.
        self.source = source


class TooLarge(CommitError):
    """A body is larger than ``max_hook_bytes``."""

    def __init__(self, index: int, size: int, max_bytes: int) -> None:
        super().__init__(f"hook {index}: body of {size} bytes is over the limit of {max_bytes}")
        #: 0-based index of the hook in the call.
        self.index = index
        #: Its size, bytes.
        self.size = size
        #: The limit, bytes.
        self.max_bytes = max_bytes


class BadRequest(CommitError):
    """A malformed call: a bad tenant or source id, no hooks, headers that are not strings."""


@dataclass(frozen=True)
class Hook:
    """One hook: a body (any bytes; a ``str`` is encoded as UTF-8) and the headers sent with
    every delivery of it (names are HTTP tokens, values strings without control characters)."""

    body: Union[bytes, str]
    headers: Mapping[str, str] = field(default_factory=dict)
    #: The event type (``push``, ``pull_request.opened``) the sink entries' event filters
    #: match; ``None``: only entries without a filter take the hook.
    event_type: Optional[str] = None
    #: The producer's idempotency key (at most 256 bytes, e.g. the upstream event's id): a
    #: hook whose key was committed to the same tenant and source within the producer's
    #: ``idempotency_ms`` is not written again, so a retry after a lost reply commits once.
    idempotency_key: Optional[str] = None

    def _body_bytes(self) -> bytes:
        return self.body.encode("utf-8") if isinstance(self.body, str) else bytes(self.body)

    def _headers_json(self) -> str:
        if not self.headers:
            return ""
        for k, v in self.headers.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise BadRequest(f"header {k!r}: names and values must be strings")
            # Checked here: the commit script stores what it is given, and a header HTTP
            # cannot carry would dead-letter the hook at its first attempt.
            if not _HEADER_NAME.match(k):
                raise BadRequest(f"header name {k!r}: not an HTTP token")
            if not _HEADER_VALUE.match(v):
                raise BadRequest(f"header {k!r}: its value must be visible ASCII, spaces and tabs")
        return json.dumps(dict(self.headers), separators=(",", ":"), ensure_ascii=False)


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
    ``"default"``); ``partitions`` its partition count (the config's ``partitions``, default
    1): each commit goes to its tenant's partition (:func:`partition_of`).
    ``max_hook_bytes`` is checked here before sending; the commit script
    enforces the leader's ``commit.max_hook_bytes`` itself (kept in Redis), so this can only
    lower the limit, never raise it.
    ``idempotency_ms`` is how long a hook's idempotency key is remembered (ankusa's
    ``commit.idempotency_ms``, default 24 h), > 0.
    ``script`` overrides the shipped commit script (e.g. the output of ``ankusa
    commit-script`` of the binary you run). The script is called by SHA and loaded again
    when Redis answers ``NOSCRIPT`` (a restart, a failover).
    """

    def __init__(
        self,
        client: "redis.Redis",
        instance: str = "default",
        max_hook_bytes: int = DEFAULT_MAX_HOOK_BYTES,
        script: Optional[str] = None,
        partitions: int = 1,
        idempotency_ms: int = DEFAULT_IDEMPOTENCY_MS,
    ) -> None:
        if not _INSTANCE.match(instance):
            raise BadRequest(f"instance {instance!r}: must match [a-z0-9_-]{{1,64}}")
        if not 1 <= partitions <= 1024:
            raise BadRequest("partitions must be in 1..=1024")
        if max_hook_bytes <= 0:
            raise BadRequest("max_hook_bytes must be > 0")
        if idempotency_ms <= 0:
            raise BadRequest("idempotency_ms must be > 0")
        self._idem_ms = idempotency_ms
        self._client = client
        self._instance = instance
        self._partitions = partitions
        self._max = max_hook_bytes
        self._script = client.register_script(script if script is not None else commit_script())

    @property
    def sha(self) -> str:
        """SHA-1 of the commit script, as ``ankusa commit-script --sha`` prints it."""
        return str(self._script.sha)

    def commit(
        self,
        tenant: str,
        source: str,
        body: Union[bytes, str],
        headers: Optional[Mapping[str, str]] = None,
        event_type: Optional[str] = None,
        idempotency_key: Optional[str] = None,
    ) -> CommitReceipt:
        """Commit one hook to ``(tenant, source)``. Raises :class:`CommitError` (nothing
        written) or a redis-py error (Redis unreachable: the hook may or may not be
        committed if the reply was lost; retry with the same ``idempotency_key`` and it is
        committed once)."""
        hook = Hook(body, dict(headers or {}), event_type, idempotency_key)
        return self.commit_many(tenant, source, [hook])

    def commit_many(self, tenant: str, source: str, hooks: Sequence[Hook]) -> CommitReceipt:
        """Commit several hooks in one atomic call: all or none; their ids are consecutive."""
        for what, value in (("tenant", tenant), ("source", source)):
            if not isinstance(value, str) or not _ID.match(value):
                raise BadRequest(f"{what} id {value!r}: must match [A-Za-z0-9_.-]{{1,128}}")
        if not hooks:
            raise BadRequest("no hooks")
        # The tenant's partition: its keys share the hash tag {<instance>.p<N>}.
        prefix = f"ankusa:{{{self._instance}.p{partition_of(tenant, self._partitions)}}}:"
        args: List[Union[bytes, str, int]] = [prefix, tenant, source, self._max, len(hooks)]
        for i, h in enumerate(hooks):
            body = h._body_bytes()
            if len(body) > self._max:
                raise TooLarge(i, len(body), self._max)
            args += [body, h._headers_json()]
        events = any(h.event_type is not None for h in hooks)
        if events:
            args.append("events")
            for h in hooks:
                et = h.event_type or ""
                if et and not _EVENT_TYPE.match(et):
                    raise BadRequest(f"event type {et!r}: must be 1..=128 bytes of [A-Za-z0-9_.:/-]")
                args.append(et)
        keyed = any(h.idempotency_key is not None for h in hooks)
        if keyed:
            args += ["idem", self._idem_ms]
            for h in hooks:
                k = h.idempotency_key or ""
                if not isinstance(k, str) or len(k.encode("utf-8")) > _MAX_IDEMPOTENCY_KEY_BYTES:
                    raise BadRequest(f"idempotency key {k!r}: must be a str of at most "
                                     f"{_MAX_IDEMPOTENCY_KEY_BYTES} bytes")
                args.append(k)
        reply = self._script(keys=[prefix + "lease"], args=args)
        status = _text(reply[0]) if reply else ""
        if status == "ok":
            n = len(hooks)
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
            limit = int(reply[3]) if len(reply) > 3 else self._max
            raise TooLarge(int(reply[1]) - 1, int(reply[2]), limit)
        if status == "bad_request":
            raise BadRequest(_text(reply[1]) if len(reply) > 1 else "bad request")
        if status == "reserved_header" and len(reply) > 2:
            raise BadRequest(f"hook {int(reply[1]) - 1}: header {_text(reply[2])!r} is reserved "
                             "(names starting with webhook- or ankusa- are the delivery's own)")
        raise CommitError(f"unexpected reply from the commit script: {reply!r}")


def _text(v: object) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
