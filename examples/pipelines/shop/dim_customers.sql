-- pipeline
-- materialize scd2 ducklake://main/dim_customers key=customer_id track=email,segment
-- data_test not_null segment
-- owner team:crm
-- tag core
--
-- The customer dimension with history (SCD type 2). A change of e-mail or
-- segment closes the customer's current version and opens a new one; a
-- change to another column (a corrected last name) opens no new version.
-- Rows carry valid_from, valid_to and is_current, and the view
-- dim_customers_current holds one row per customer: reading it is reading
-- this asset.
SELECT
    customer_id,
    first_name,
    last_name,
    email,
    segment,
    country,
    signup_date
FROM lake.main.customers
