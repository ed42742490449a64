# pipeline
# partitioned daily start=2025-01-01
# materialize manual s3:///raw/events/{partition}.csv
# retry 2 30s
# tag ingest
# pool ingest
# owner data-eng@shop.example
#
# The web shop's clickstream for one day, as a CSV file in object storage:
# one row per event (page_view, product_view, add_to_cart, checkout,
# purchase) with the visitor, the device and the product looked at.
# Stands in for a tracking export; generated from a generator seeded with
# the day, so a day's file is always the same.
from __future__ import annotations

import csv
import datetime as dt
import random
from pathlib import Path

from lineage_defs import runtime

TARGET = "s3:///raw/events/{partition}.csv"
DEVICES = ("mobile", "mobile", "mobile", "desktop", "desktop", "tablet")
# Probability of moving on to the next step of the funnel.
FUNNEL = (("product_view", 0.75), ("add_to_cart", 0.35), ("checkout", 0.6), ("purchase", 0.8))


def visit(rng: random.Random, visitor: int, device: str, at: dt.datetime) -> list[tuple[object, ...]]:
    """One visit: a landing page view, then as far down the funnel as the visitor goes."""
    events = [(visitor, device, at, "page_view", None)]
    product = rng.randint(1, 40)
    for step, p in FUNNEL:
        if rng.random() > p:
            break
        # Browsing: a few more products looked at before the next step.
        for _ in range(rng.randint(0, 3) if step == "product_view" else 0):
            at += dt.timedelta(seconds=rng.randint(10, 240))
            product = rng.randint(1, 40)
            events.append((visitor, device, at, "product_view", product))
        at += dt.timedelta(seconds=rng.randint(5, 300))
        events.append((visitor, device, at, step, product))
    return events


def clickstream(day: dt.date) -> list[tuple[object, ...]]:
    rng = random.Random(day.isoformat())
    events: list[tuple[object, ...]] = []
    for _ in range(rng.randint(350, 550)):
        visitor = rng.randint(1, 5000)
        device = rng.choice(DEVICES)
        at = dt.datetime.combine(day, dt.time(rng.randint(6, 22), rng.randint(0, 59), rng.randint(0, 59)))
        events += visit(rng, visitor, device, at)
        if rng.random() < 0.15:  # a second visit later the same day: a new session
            events += visit(rng, visitor, device, at + dt.timedelta(minutes=rng.randint(45, 90)))
    # Events past midnight belong to the next day's file.
    return sorted((e for e in events if e[2].date() == day), key=lambda e: (e[2], e[0]))


part = runtime.partition()
if part is None:
    raise SystemExit("raw_events is partitioned by day: run it for a partition")
# On the default (local) object storage, the object is a file: write it there.
path = Path(runtime.path(TARGET))
path.parent.mkdir(parents=True, exist_ok=True)
rows = clickstream(part.start.date())
tmp = path.with_name(path.name + ".tmp")
with tmp.open("w", newline="") as f:
    out = csv.writer(f)
    out.writerow(("event_id", "visitor_id", "device", "event_ts", "event_type", "product_id"))
    for i, (visitor, device, at, kind, product) in enumerate(rows, start=1):
        out.writerow((f"{part.key}-{i:05d}", visitor, device, at.isoformat(sep=" "), kind, product))
tmp.replace(path)  # readers never see half a file
print(f"wrote {len(rows)} events to {path}")
