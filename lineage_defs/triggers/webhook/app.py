"""The webhook receiver: ``POST /hooks/<name>`` → the event store, durably, before ``202``.

SPEC section 6, in the order the checks run (the connection-level limits —
connection cap, header deadline and size, keep-alive — are ``guard``'s):

1. unknown hook → 404;
2. a hook with neither a token nor a secret configured refuses everything → 401;
   a configured token must come as ``Authorization: Bearer <token>`` → else 401,
   checked before any of the body is read;
3. a body over the limit → 413, from ``Content-Length`` or while reading (the
   body is never read past the limit); a body not sent within
   ``body_timeout``, or pausing longer than ``header_timeout`` (headers and
   then nothing) → 408, and the connection is closed;
4. a hook with only a secret must read the body before it can check it: the
   HMAC is computed chunk by chunk as the body arrives, and such bodies are
   held in memory only while they fit ``max_buffered_bytes`` (shared by all of
   them), else in a temporary file (``TMPDIR``; unlinked, gone with the
   process): a flood of unauthenticated bodies costs disk, bounded by the
   connection cap × the body limit, never the memory, and a valid sender is
   served meanwhile; a temporary file that cannot be made → 503 with
   ``Retry-After``;
5. a configured secret must sign the raw body: ``X-Lineage-Signature:
   sha256=<hex HMAC-SHA256>`` → else 401 (constant-time comparisons throughout);
6. a body that is not strict JSON (UTF-8, no ``NaN``/``Infinity``, nested at
   most 64 deep) → 400; a partition value the step cannot use (missing,
   hostile, not a partition, or anything else that goes wrong reading it) → 400;
7. stored and committed (group commit, ``synchronous=FULL``) → ``202 {"id": …}``;
   a repeated ``Idempotency-Key`` answers the first id and stores nothing.

Nothing is stored for any refused request, and no client input gets a 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from lineage_defs.events.partition import PartitionValueError, raw_value
from lineage_defs.events.payload import PayloadError, parse_json
from lineage_defs.events.store import EventStore, NewEvent
from lineage_defs.triggers.push import GroupWriter
from lineage_defs.triggers.webhook.guard import Limits

log = logging.getLogger("lineage_defs.webhooks")

DEFAULT_MAX_BYTES = 1024 * 1024
# Request headers kept with the event (credentials never are).
_DROP_HEADERS = {"authorization", "x-lineage-signature", "cookie", "proxy-authorization"}
_MAX_IDEMPOTENCY_KEY = 200


@dataclass(frozen=True)
class Hook:
    name: str
    stream: str
    step_path: str
    token: str | None = None
    secret: str | None = None
    partition_from: str | None = None
    # raw value → partition key (raises PartitionValueError); None: the step takes no partition
    partition_key: Callable[[str], str] | None = None


def _refuse(status: int, message: str, close: bool = False, retry_after: int | None = None) -> JSONResponse:
    """An error answer; ``close`` when the rest of the request's body may still be on its way."""
    headers = {"Connection": "close"} if close else {}
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    return JSONResponse({"error": message}, status_code=status, headers=headers or None)


class Budget:
    """Bytes of bodies held in memory before their credential can be checked, at once (one event loop: no lock)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.taken = 0

    def take(self, n: int) -> bool:
        if self.taken + n > self.limit:
            return False
        self.taken += n
        return True

    def give(self, n: int) -> None:
        self.taken -= n


class Spool:
    """A body as it arrives, its HMAC updated chunk by chunk.

    In memory while ``budget`` has room (``budget`` None: always — its sender
    is authenticated already, and the body limit bounds it), else moved to a
    temporary file for the rest of it; ``close`` gives the memory back.
    """

    def __init__(self, budget: Budget | None, secret: str | None) -> None:
        self.budget = budget
        self.mac = hmac.new(secret.encode(), digestmod=hashlib.sha256) if secret is not None else None
        self.file: tempfile.SpooledTemporaryFile[bytes] = tempfile.SpooledTemporaryFile(max_size=0)  # 0: rolled over by us
        self.size = 0
        self.held = 0  # bytes of the budget this body holds
        self.on_disk = False

    def write(self, chunk: bytes) -> None:
        """Raises OSError when the temporary file cannot be made or written (no space, no descriptors)."""
        if self.mac is not None:
            self.mac.update(chunk)
        self.size += len(chunk)
        if self.budget is not None and not self.on_disk:
            if self.budget.take(len(chunk)):
                self.held += len(chunk)
            else:
                self.file.rollover()
                self.on_disk = True
                self.budget.give(self.held)
                self.held = 0
        self.file.write(chunk)

    def signed(self, request: Request) -> bool:
        sig = request.headers.get("x-lineage-signature", "")
        if self.mac is None or not sig.startswith("sha256="):
            return False
        return hmac.compare_digest(sig[len("sha256="):].strip().lower().encode(), self.mac.hexdigest().encode())

    def read(self) -> bytes:
        self.file.seek(0)
        return self.file.read()

    def close(self) -> None:
        self.file.close()
        if self.budget is not None:
            self.budget.give(self.held)
            self.held = 0


def _bearer_ok(request: Request, token: str) -> bool:
    auth = request.headers.get("authorization", "")
    scheme, _, given = auth.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


class _Stalled(Exception):
    """The body paused longer than allowed."""


async def _receive_body(request: Request, spool: Spool, limit: int, timeout: float, pause: float) -> bool:
    """The body into ``spool``; False as soon as it passes ``limit`` bytes (the rest is never read).

    TimeoutError after ``timeout`` s in all, _Stalled when no byte came for ``pause`` s.
    """
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    try:
        async with asyncio.timeout_at(min(end, loop.time() + pause)) as deadline:
            async for chunk in request.stream():
                if spool.size + len(chunk) > limit:
                    return False
                spool.write(chunk)
                deadline.reschedule(min(end, loop.time() + pause))
    except TimeoutError:
        if loop.time() < end - 0.001:
            raise _Stalled() from None
        raise
    return True


def make_app(hooks: dict[str, Hook], store: str | Path, max_bytes: int = DEFAULT_MAX_BYTES, limits: Limits = Limits()) -> Starlette:
    """The Starlette app; ``store`` is what ``EventStore`` opens (``settings.events_location``: the SQLite file or the PostgreSQL DSN)."""
    writer: GroupWriter | None = None
    budget = Budget(limits.max_buffered_bytes)

    async def receive(request: Request) -> JSONResponse:
        name = request.path_params["name"]
        hook = hooks.get(name)
        if hook is None:
            return _refuse(404, f"no webhook named {name!r}")
        if hook.token is None and hook.secret is None:
            return _refuse(401, f"webhook {name!r} has no credential configured, so it accepts nothing (set LINEAGE_WEBHOOK_TOKEN_ or LINEAGE_WEBHOOK_SECRET_ for it)")
        if hook.token is not None and not _bearer_ok(request, hook.token):
            return _refuse(401, "missing or wrong credentials")
        declared = request.headers.get("content-length")
        if declared is not None:
            if not (declared.isascii() and declared.isdigit()) or len(declared) > 18:  # "²".isdigit() is True
                return _refuse(400, "bad Content-Length", close=True)
            if int(declared) > max_bytes:
                return _refuse(413, f"body of {declared} bytes is over the limit of {max_bytes}", close=True)
        # A token was checked before reading; a secret only after: such bodies are held in memory while the budget lasts.
        spool = Spool(budget if hook.token is None else None, hook.secret)
        try:
            try:
                whole = await _receive_body(request, spool, max_bytes, limits.body_timeout, limits.header_timeout)
            except ClientDisconnect:
                return _refuse(400, "the client went away before sending the whole body", close=True)
            except _Stalled:
                return _refuse(408, f"no byte of the body arrived for {limits.header_timeout:g} s", close=True)
            except TimeoutError:
                return _refuse(408, f"the body did not arrive within {limits.body_timeout:g} s", close=True)
            except OSError as e:
                log.error(f"holding a request body for {name} in a temporary file failed: {e}")
                return _refuse(503, "the receiver cannot hold the body now; retry shortly", close=True, retry_after=1)
            if not whole:
                return _refuse(413, f"body is over the limit of {max_bytes} bytes", close=True)
            if hook.secret is not None and not spool.signed(request):
                return _refuse(401, "missing or wrong credentials")
            body = spool.read()
        finally:
            spool.close()
        try:
            parse_json(body)
        except PayloadError as e:
            return _refuse(400, f"the body is not usable JSON: {e}")
        idem = request.headers.get("idempotency-key")
        if idem is not None and (not idem or len(idem) > _MAX_IDEMPOTENCY_KEY or not idem.isprintable()):
            return _refuse(400, f"Idempotency-Key must be 1 to {_MAX_IDEMPOTENCY_KEY} printable characters")
        headers = [(k, v) for k, v in request.headers.items() if k not in _DROP_HEADERS]
        now = int(time.time() * 1000)
        pkey = None
        if hook.partition_key is not None and hook.partition_from is not None:
            try:
                raw = raw_value(hook.partition_from, value=body, key=idem.encode() if idem else None, headers=headers, timestamp_ms=now)
                pkey = hook.partition_key(raw)
            except PartitionValueError as e:
                return _refuse(400, f"no usable partition for step {hook.step_path} (partition_from={hook.partition_from}): {e}")
            except Exception as e:  # noqa: BLE001 - client input never gets a 500
                log.warning(f"reading the partition value of a request for {name} failed: {type(e).__name__}: {e}")
                return _refuse(400, f"no usable partition for step {hook.step_path} (partition_from={hook.partition_from})")
        dedupe = f"key:{idem}" if idem is not None else f"uuid:{uuid.uuid4().hex}"
        event = NewEvent(dedupe, body, idem.encode() if idem else None, headers, now, name, None, None, pkey)
        assert writer is not None
        try:
            seq, duplicate = await writer.submit(hook.stream, event)
        except Exception as e:  # the store refused: nothing is stored, the sender must retry
            log.error(f"storing a request for {name} failed: {e}")
            return _refuse(503, "the event store is unavailable; retry later")
        return JSONResponse({"id": str(seq), "duplicate": duplicate}, status_code=202, headers={"Idempotent-Replayed": "true"} if duplicate else None)

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})  # hook names are not listed: an unknown one is a plain 404

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        nonlocal writer
        writer = GroupWriter(store, name="lineage-webhook-writer")
        try:
            yield
        finally:
            writer.close()

    return Starlette(
        routes=[Route("/hooks/{name}", receive, methods=["POST"]), Route("/health", health, methods=["GET"])],
        lifespan=lifespan,
    )
