-- macros
--
-- Money helpers for the shop's DuckDB steps. Amounts travel as integer cents
-- from the shop front, reports show euros. Every step of the shop pipeline
-- gets these macros: steps of other pipelines add `use shop/macros/money.sql`.
CREATE OR REPLACE MACRO cents_to_eur(c) AS c / 100.0;

-- The net amount of a gross amount at a VAT rate, rounded to the cent.
CREATE OR REPLACE MACRO net_of_vat(gross, rate) AS round(gross / (1 + rate), 2);
