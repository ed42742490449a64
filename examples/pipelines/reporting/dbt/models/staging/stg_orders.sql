-- Orders that count for reporting: not cancelled, at least min_amount_eur.
select
    order_id,
    customer_id,
    product_id,
    order_date,
    amount_eur
from {{ source('lake', 'orders') }}
where status <> 'cancelled'
  and amount_eur >= {{ var('min_amount_eur') }}
