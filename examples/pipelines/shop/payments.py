# pipeline
# partitioned daily start=2025-01-01
# on webhook name=payments partition_from=json:$.paid_at
# trigger manual
# materialize ducklake://main/payments key=payment_id
# data_test unique payment_id
# data_test not_null amount_eur
# data_test relationships order_id -> ducklake://main/orders.order_id severity=warn
# tag streaming
# owner team:finance
# on_failure hooks/notify.py after=2
#
# Payment confirmations pushed by the payment provider to
# POST /hooks/payments (`lineage-defs webhooks serve`), one JSON body per
# payment: {"payment_id": "p-1", "order_id": 202501020001, "amount_eur": 59.9,
# "paid_at": "2025-01-02T10:15:00Z"}. Each request lands in the day of its
# paid_at; the sensor turns the stored requests into one run per day and
# batch, and the merge on payment_id keeps a payment once however often the
# provider re-sends it. A payment of an order that is not in orders (yet) is
# kept, with a warning. Run by the webhook's posts, not by updates of orders
# (trigger manual): a run without posts has nothing to merge. Fed by a
# webhook, its days include today (the other daily steps end with yesterday).
from __future__ import annotations

import json

import pandas as pd

from lineage_defs import runtime

rows = []
for event in runtime.events():
    body = json.loads(event["value"])
    rows.append(
        {
            "payment_id": str(body["payment_id"]),
            "order_id": int(body["order_id"]),
            "amount_eur": float(body["amount_eur"]),
            "paid_at": pd.Timestamp(body["paid_at"]).tz_convert("UTC").tz_localize(None),
            "received_at": pd.Timestamp(event["timestamp"], unit="ms"),
        }
    )
# Typed even when empty (a run without posts, as "Materialize all" starts one): the first
# write creates the table, and an untyped empty column would become INTEGER.
frame = pd.DataFrame(rows, columns=["payment_id", "order_id", "amount_eur", "paid_at", "received_at"]).astype(
    {"payment_id": "string", "order_id": "int64", "amount_eur": "float64", "paid_at": "datetime64[ns]", "received_at": "datetime64[ns]"}
)
runtime.log(f"{len(frame)} payments in this batch")
runtime.write(frame)
