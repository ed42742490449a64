"""``on webhook [name=…]``: the webhook source as data (see ``triggers.source``). No Dagster, no HTTP server."""

from __future__ import annotations

import re
from dataclasses import dataclass

from lineage_defs.errors import Location
from lineage_defs.triggers.source import BadValue, Option, Source


@dataclass(frozen=True)
class Webhook:
    """``on webhook [name=…]``."""

    name: str | None
    partition_from: str | None
    at: Location


_HOOK_NAME = re.compile(r"[a-z0-9_]+")


def hook_name(step_name: str, name: str | None) -> str:
    """``on webhook name=<n>`` (``[a-z0-9_]+``, checked by the grammar), else the step's name in lower case
    (``shop/payments.py`` → ``shop__payments``)."""
    return name or step_name.lower()


def checked_hook_name(v: str) -> str:
    """A webhook name: ``[a-z0-9_]+``, so that it is its own URL path and maps one-to-one to its variables."""
    if _HOOK_NAME.fullmatch(v):
        return v
    fixed = re.sub(r"[^a-z0-9_]", "_", v.lower()) or "payments"
    raise BadValue(f"bad webhook name '{v}'", f"use lower-case letters, digits and _ only, e.g. name={fixed} (its credentials: LINEAGE_WEBHOOK_TOKEN_{fixed.upper()})")


SOURCE = Source(
    keyword="webhook",
    record=Webhook,
    options=(Option("name", ("text", checked_hook_name)),),
    identity=lambda step, t: (hook_name(step, t.name),),
    per_step=False,
    pull=False,
    receiver="lineage_defs.triggers.webhook.serve",
    text="on webhook — POST /hooks/{0} to `lineage-defs webhooks serve`",
    note="hook '{0}': ",
)
