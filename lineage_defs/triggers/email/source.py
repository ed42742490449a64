"""``on email name=<mailbox>``: the e-mail source as data (see ``triggers.source``). No Dagster, no SMTP server."""

from __future__ import annotations

import re
from dataclasses import dataclass

from lineage_defs.errors import Location
from lineage_defs.triggers.source import BadValue, Option, Source


@dataclass(frozen=True)
class Email:
    """``on email name=<mailbox>``: mail to ``<mailbox>@…`` received by ``lineage-defs email serve``."""

    name: str  # the mailbox: the recipient's local part, lower case
    partition_from: str | None
    at: Location


_MAILBOX = re.compile(r"[a-z0-9][a-z0-9._-]*")


def mailbox(v: str) -> str:
    """A mailbox: the local part of the address mail is sent to (``[a-z0-9][a-z0-9._-]*``, at most 64)."""
    if _MAILBOX.fullmatch(v) and len(v) <= 64:
        return v
    local = v.split("@", 1)[0].lower()
    fixed = re.sub(r"[^a-z0-9._-]", "_", local).lstrip("._-")[:64] or "inbox"
    raise BadValue(f"bad mailbox '{v}'", f"write the address's part before @ in lower-case letters, digits, ., - and _ (e.g. name={fixed})")


SOURCE = Source(
    keyword="email",
    record=Email,
    options=(Option("name", (mailbox,), required=True, example="orders (the mailbox: mail to orders@… runs the step)"),),
    identity=lambda step, t: (t.name,),
    per_step=False,
    pull=False,
    receiver="lineage_defs.triggers.email.serve",
    text="on email — mail to {0}@… sent to `lineage-defs email serve`",
    note="mailbox '{0}': ",
)
