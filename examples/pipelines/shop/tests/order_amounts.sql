-- Custom data test of orders.sql (`data_test tests/order_amounts.sql`).
-- It has no `pipeline` line, so it is not a step: it is a SELECT whose rows
-- are the violations. An order must be worth something, and a discount can
-- never exceed the price of the items it is given on.
SELECT order_id, quantity, unit_price_cents, discount_cents, amount_eur
FROM lake.main.orders
WHERE amount_eur <= 0
   OR discount_cents > quantity * unit_price_cents
