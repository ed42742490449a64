#!/usr/bin/env bash
# pipeline
# partitioned daily start=2025-01-01
# materialize manual s3:///raw/orders/{partition}.csv
# on schedule cron="30 2 * * *" tz=Europe/Berlin
# retry 3 10s backoff=exponential
# tag ingest
# owner data-eng@shop.example
#
# The shop front's order export for one day, as a CSV file in object storage.
# Stands in for a download from the shop system: the orders are generated
# with awk from a seed made of the date, so a day's file is always the same.
# The schedule runs at 02:30 Berlin time and builds the day that just
# closed (the partitions are UTC days).
set -euo pipefail

: "${PARTITION:?run this step through Dagster: PARTITION is not set}"
: "${LINEAGE_OUTPUT_PATH:?run this step through Dagster: LINEAGE_OUTPUT_PATH is not set}"

first_day=2025-01-01
day_index=$(( ($(date -u -d "$PARTITION" +%s) - $(date -u -d "$first_day" +%s)) / 86400 ))
weekday=$(date -u -d "$PARTITION" +%u)  # 1 = Monday ... 7 = Sunday
# Customers 1..200 existed before the first day; two sign up every day since.
customers=$(( 200 + 2 * day_index ))

tmp="$LINEAGE_OUTPUT_PATH.tmp.$$"
trap 'rm -f "$tmp"' EXIT

awk -v day="$PARTITION" -v seed="${PARTITION//-/}" -v weekday="$weekday" -v customers="$customers" '
BEGIN {
    srand(seed)
    split("placed shipped shipped delivered delivered delivered delivered cancelled on_hold", statuses, " ")
    split("card card card paypal paypal invoice", payments, " ")
    orders = 250 + int(rand() * 150) + (weekday >= 6 ? 120 : 0)
    print "order_id,customer_id,order_ts,product_id,quantity,unit_price_cents,discount_cents,status,payment_method"
    for (i = 1; i <= orders; i++) {
        # Most orders come in the afternoon and evening.
        hour = int(8 + rand() * 16 - rand() * 8)
        if (hour < 0) hour = 0
        product = 1 + int(rand() * 40)
        quantity = 1 + int(rand() * rand() * 4)
        price = 990 + (product * 7919) % 60 * 100  # the list price, as in products.sql
        discount = (rand() < 0.15) ? int(quantity * price * 0.1) : 0
        status = statuses[1 + int(rand() * 9)]
        sub(/_/, " ", status)
        printf "%s%04d,%d,%s %02d:%02d:%02d,%d,%d,%d,%d,%s,%s\n", seed, i, 1 + int(rand() * customers), day, hour, int(rand() * 60), int(rand() * 60), product, quantity, price, discount, status, payments[1 + int(rand() * 6)]
    }
}' > "$tmp"

mv "$tmp" "$LINEAGE_OUTPUT_PATH"
trap - EXIT
echo "wrote $(( $(wc -l < "$LINEAGE_OUTPUT_PATH") - 1 )) orders for $PARTITION"
