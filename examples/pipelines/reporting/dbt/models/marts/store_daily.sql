-- Revenue per day and product category.
select
    o.order_date,
    p.category,
    count(*) as order_count,
    round(sum(o.amount_eur), 2) as revenue_eur
from {{ ref('stg_orders') }} as o
join {{ source('lake', 'products') }} as p on p.product_id = o.product_id
group by o.order_date, p.category
