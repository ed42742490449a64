"""The e-mail receiver: SMTP (aiosmtpd) → the event store, durably, before ``250``.

Per SMTP command, in the order a sender meets them:

1. ``RCPT TO``: the address's local part must be a project's mailbox
   (``on email name=<mailbox>``, any domain) → else ``550`` naming the known ones;
2. ``MAIL FROM … SIZE=`` or ``DATA`` over ``LINEAGE_EMAIL_MAX_BYTES`` → ``552``
   (aiosmtpd's own limit: the rest is never kept);
3. ``DATA``: the message is parsed (stdlib ``email`` with ``compat32``: the
   modern ``policy.default`` API measured 16× slower per mail in
   research/events) into one event per accepted mailbox; a message that cannot
   be used (no headers, no ``From``) or carries no usable partition value is
   stored *rejected* with its reason and still answered ``250``: a sender
   retrying it would never succeed, and nothing behind it waits;
4. stored and committed (``push.GroupWriter``: sessions share commits) → ``250``;
   the store failing → ``451``, so the sending server keeps the mail and retries.

A resend (the sender did not see our ``250``) carries the same ``Message-ID``:
it is the event's dedupe id in the mailbox's stream, so it stores nothing new.
A message without one is deduplicated by the SHA-256 of its bytes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email import policy, utils
from email.header import decode_header, make_header
from email.message import Message
from email.parser import BytesParser
from typing import Any

from lineage_defs.events.partition import PartitionValueError, raw_value
from lineage_defs.events.store import NewEvent
from lineage_defs.triggers.push import GroupWriter

log = logging.getLogger("lineage_defs.email")


@dataclass(frozen=True)
class Mailbox:
    name: str
    stream: str
    step_path: str
    partition_from: str | None = None
    # raw value → partition key (raises PartitionValueError); None: the step takes no partition
    partition_key: Callable[[str], str] | None = None


class Unusable(ValueError):
    """A message that cannot become an event (stored rejected with this reason)."""


def _clean(text: str) -> str:
    """Header text as valid Unicode: undecodable bytes (surrogate-escaped by the parser) become U+FFFD."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _header(value: Any) -> str:
    """A header decoded from its RFC 2047 words (``=?utf-8?q?…?=``); as written when they are broken."""
    if value is None:
        return ""
    try:
        return _clean(str(make_header(decode_header(str(value)))))
    except Exception:  # noqa: BLE001 - an unknown charset or a bad encoded word: keep the raw text
        return _clean(str(value))


def _text(part: Message) -> str:
    payload = part.get_payload(decode=True)
    data = payload if isinstance(payload, bytes) else b""
    try:
        return data.decode(part.get_content_charset() or "utf-8", "replace")
    except LookupError:  # a charset Python does not know
        return data.decode("utf-8", "replace")


def parse_mail(raw: bytes) -> dict[str, Any]:
    """The event of a message: from, to, cc, subject, date (ISO 8601), message_id, the first text/plain part,
    and each attachment's name and size in bytes. ``Unusable`` saying why when there is none."""
    msg = BytesParser(policy=policy.compat32).parsebytes(raw)
    if not msg.keys():
        raise Unusable(f"no mail headers ({', '.join(type(d).__name__ for d in msg.defects) or 'nothing before the body'})")
    if not msg["from"]:
        raise Unusable("no From header")
    text: str | None = None
    attachments: list[dict[str, Any]] = []
    for part in msg.walk():
        if part.is_multipart():
            continue
        name = part.get_filename()
        if name or str(part.get("content-disposition", "")).lower().startswith("attachment"):
            payload = part.get_payload(decode=True)
            attachments.append({"name": _header(name) if name else None, "size": len(payload) if isinstance(payload, bytes) else 0})
        elif text is None and part.get_content_type() == "text/plain":
            text = _text(part)
    date = None
    if msg["date"]:
        try:
            date = utils.parsedate_to_datetime(str(msg["date"])).isoformat()
        except (TypeError, ValueError, IndexError):
            date = None  # an unreadable Date: the event still runs, its date is null
    return {
        "from": _header(msg["from"]),
        "to": _header(msg["to"]),
        "cc": _header(msg["cc"]) or None,
        "subject": _header(msg["subject"]),
        "date": date,
        "message_id": _header(msg["message-id"]).strip() or None,
        "text": text,
        "attachments": attachments,
    }


def dedupe_id(raw: bytes) -> str:
    """``message-id:<id>`` (what a resend repeats), else the SHA-256 of the bytes."""
    head = BytesParser(policy=policy.compat32).parsebytes(raw, headersonly=True)
    mid = str(head["message-id"] or "").strip()
    if mid and mid.isprintable() and len(mid) <= 512:
        return f"message-id:{mid}"
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def mailbox_of(address: str) -> str:
    """``Orders@Example.org`` → ``orders`` (mailboxes are local parts, in any domain, without case)."""
    return address.rsplit("@", 1)[0].strip().lower() if "@" in address else address.strip().lower()


def events_of(raw: bytes, boxes: list[Mailbox], mail_from: str, now_ms: int) -> list[tuple[str, NewEvent]]:
    """One event per mailbox the message was accepted for (rejected ones carry their reason)."""
    dedupe = dedupe_id(raw)
    try:
        doc = parse_mail(raw)
        value = json.dumps(doc, ensure_ascii=False).encode()
        error = None
    except Exception as e:  # noqa: BLE001 - whatever the bytes are, they are kept with the reason
        doc, value, error = None, raw, f"not a usable e-mail message: {type(e).__name__}: {e}"[:500]
    key = doc["message_id"].encode() if doc and doc["message_id"] else None
    headers = [("mail_from", _clean(mail_from))]
    out: list[tuple[str, NewEvent]] = []
    for box in boxes:
        pkey, why = None, error
        if why is None and box.partition_key is not None and box.partition_from is not None:
            try:
                pkey = box.partition_key(raw_value(box.partition_from, value=value, key=key, headers=headers, timestamp_ms=now_ms))
            except PartitionValueError as e:
                why = f"partition_from={box.partition_from}: {e}"
            except Exception as e:  # noqa: BLE001 - the mail is kept with the reason, never stalls the mailbox
                why = f"partition_from={box.partition_from}: cannot read a partition value ({type(e).__name__}: {str(e)[:200]})"
        out.append((box.stream, NewEvent(dedupe, value, key, [*headers, ("rcpt_to", box.name)], now_ms, box.name, None, None, pkey, why)))
    return out


class Handler:
    """aiosmtpd's handler: the RCPT check, then store-before-250 for DATA."""

    def __init__(self, boxes: Mapping[str, Mailbox], writer: GroupWriter) -> None:
        self.boxes = dict(boxes)
        self.writer = writer

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str, rcpt_options: list[str]) -> str:
        name = mailbox_of(address)
        if name not in self.boxes:
            shown = "".join(c if c.isascii() and c.isprintable() else "?" for c in name[:64])  # a reply line is ASCII
            return f"550 5.1.1 no mailbox '{shown}' here; known: {', '.join(sorted(self.boxes)) or 'none'}"
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        raw = envelope.original_content or b""
        names = dict.fromkeys(mailbox_of(a) for a in envelope.rcpt_tos)  # two addresses of one mailbox: one event
        items = events_of(raw, [self.boxes[n] for n in names], str(envelope.mail_from or ""), int(time.time() * 1000))
        try:
            await asyncio.gather(*(self.writer.submit(stream, event) for stream, event in items))
        except Exception as e:  # nothing or part stored: the sender retries, the Message-ID dedupes what was
            log.error(f"storing a message for {', '.join(names)} failed: {e}")
            return "451 4.3.0 the event store is unavailable; try again later"
        rejected = [e.error for _, e in items if e.error]
        return f"250 2.0.0 stored{' (rejected: ' + _ascii(rejected[0])[:200] + ')' if rejected else ''}"


def _ascii(text: str) -> str:
    return "".join(c if c.isascii() and c.isprintable() else "?" for c in text)


async def serve_forever(boxes: Mapping[str, Mailbox], store: Any, host: str, port: int, max_bytes: int, ready: Callable[[], None] | None = None) -> None:
    """Listen on ``host:port`` until cancelled; ``store`` is what ``EventStore`` opens."""
    from aiosmtpd.smtp import SMTP

    writer = GroupWriter(store, name="lineage-email-writer")
    try:
        handler = Handler(boxes, writer)
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            # hostname given: aiosmtpd would otherwise ask DNS for this machine's name (socket.getfqdn) per session
            lambda: SMTP(handler, data_size_limit=max_bytes, enable_SMTPUTF8=True, hostname="lineage-defs", ident="lineage-defs email receiver"),
            host, port, backlog=512,
        )  # fmt: skip
        async with server:
            if ready is not None:
                ready()
            await server.serve_forever()
    finally:
        writer.close()
