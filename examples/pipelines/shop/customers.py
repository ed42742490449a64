# pipeline
# partitioned daily start=2025-01-01
# materialize ducklake://main/customers key=customer_id
# data_test unique customer_id
# data_test not_null email
# data_test accepted_values segment = new,regular,vip
# tag ingest
# owner team:crm
#
# The CRM's daily customer export, merged on customer_id: new sign-ups are
# inserted, changed e-mail addresses and segments overwrite the old values.
# The export is the full customer list as of the partition's day, so any one
# day is enough for the orders of that day to find their customers.
# Generated locally: every customer's history is drawn from a generator
# seeded with the customer id, so a day's export is always the same.
from __future__ import annotations

import datetime as dt
import random

import pandas as pd

from lineage_defs import runtime

FIRST_DAY = dt.date(2025, 1, 1)  # the first partition
ESTABLISHED = 200  # customers who signed up before the first partition
SIGNUPS_PER_DAY = 2  # customer ids 201, 202 sign up on day 0, 203, 204 on day 1, ...
FIRST_NAMES = ("Anna", "Ben", "Clara", "David", "Emma", "Felix", "Greta", "Hugo", "Ida", "Jonas", "Lena", "Max", "Nora", "Oskar", "Paula", "Theo")
LAST_NAMES = ("Becker", "Fischer", "Hoffmann", "Klein", "Koch", "Meyer", "Müller", "Richter", "Schmidt", "Schulz", "Wagner", "Weber", "Wolf", "Zimmermann")
COUNTRIES = ("DE", "DE", "DE", "AT", "CH", "NL", "FR")
DOMAINS = ("example.com", "mail.example", "post.example")


def signup_day(customer_id: int, rng: random.Random) -> dt.date:
    if customer_id <= ESTABLISHED:
        return FIRST_DAY - dt.timedelta(days=rng.randint(30, 900))
    return FIRST_DAY + dt.timedelta(days=(customer_id - ESTABLISHED - 1) // SIGNUPS_PER_DAY)


def customer_as_of(customer_id: int, day: dt.date) -> dict[str, object] | None:
    """The customer's CRM record at the end of ``day``, or None before sign-up."""
    rng = random.Random(customer_id)
    signed_up = signup_day(customer_id, rng)
    if signed_up > day:
        return None
    first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
    handle = f"{first}.{last}".lower().replace("ü", "ue")
    # The customer's changes, each on a day after sign-up: (day, field, value).
    changes = [(signed_up + dt.timedelta(days=rng.randint(20, 200)), "segment", "regular")]
    if rng.random() < 0.2:
        changes.append((signed_up + dt.timedelta(days=rng.randint(201, 500)), "segment", "vip"))
    if rng.random() < 0.25:
        changes.append((signed_up + dt.timedelta(days=rng.randint(10, 400)), "email", f"{handle}{customer_id}@{rng.choice(DOMAINS)}"))
    record: dict[str, object] = {
        "customer_id": customer_id,
        "first_name": first,
        "last_name": last,
        "email": f"{handle}{customer_id}@{DOMAINS[0]}",
        "segment": "new",
        "country": rng.choice(COUNTRIES),
        "signup_date": signed_up,
        "updated_at": dt.datetime.combine(signed_up, dt.time(9, rng.randint(0, 59))),
    }
    for changed_on, name, value in sorted(changes):
        if changed_on <= day:
            record[name] = value
            record["updated_at"] = dt.datetime.combine(changed_on, dt.time(rng.randint(8, 20), rng.randint(0, 59)))
    return record


def export(day: dt.date) -> pd.DataFrame:
    days_in = max((day - FIRST_DAY).days + 1, 0)
    ids = range(1, ESTABLISHED + SIGNUPS_PER_DAY * days_in + 1)
    rows = [r for r in (customer_as_of(i, day) for i in ids) if r is not None]
    df = pd.DataFrame(rows)
    df["signup_date"] = pd.to_datetime(df["signup_date"])
    df["updated_at"] = pd.to_datetime(df["updated_at"])
    return df


part = runtime.partition()
# Run by hand without a partition, the export is today's.
runtime.write(export(part.start.date() if part is not None else dt.date.today()))
