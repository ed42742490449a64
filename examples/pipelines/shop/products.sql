-- pipeline
-- materialize ducklake://main/products
-- data_test unique product_id
-- data_test not_null price_cents
-- data_test accepted_values category = apparel,shoes,accessories,"home & living"
-- data_test rows_between 10 1000
-- tag reference
-- owner team:merchandising
--
-- The product catalogue: 40 products in four categories with their list
-- prices in cents. Rebuilt as a whole on every run (replace).
-- Reference data: the revenue steps mute it, so a catalogue refresh does not
-- re-run every day of revenue.
WITH catalogue AS (
    SELECT
        range AS product_id,
        ['apparel', 'shoes', 'accessories', 'home & living'][1 + (range - 1) % 4] AS category,
        (range - 1) // 4 AS variant
    FROM range(1, 41)
),
names AS (
    SELECT
        product_id,
        category,
        CASE category
            WHEN 'apparel' THEN ['Linen Shirt', 'Wool Sweater', 'Rain Jacket', 'Chino Trousers', 'Denim Jacket']
            WHEN 'shoes' THEN ['Trail Runner', 'Leather Boot', 'Canvas Sneaker', 'Sandal', 'Loafer']
            WHEN 'accessories' THEN ['Canvas Tote', 'Leather Belt', 'Wool Scarf', 'Sunglasses', 'Beanie']
            ELSE ['Ceramic Mug', 'Linen Towel', 'Scented Candle', 'Throw Blanket', 'Plant Pot']
        END[1 + variant % 5] || CASE WHEN variant >= 5 THEN ' II' ELSE '' END AS product_name,
        variant
    FROM catalogue
)
SELECT
    product_id,
    product_name,
    category,
    -- The same price formula as the order export (raw_orders.sh): 9.90 to 68.90 EUR.
    990 + (product_id * 7919) % 60 * 100 AS price_cents,
    variant < 8 AS is_active
FROM names
ORDER BY product_id
