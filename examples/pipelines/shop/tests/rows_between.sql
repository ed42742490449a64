-- test_type rows_between min:int max:int
--
-- A reusable data test (a test type, not a step): the slice just written
-- must hold between $min and $max rows. A step uses it with
-- `data_test rows_between <min> <max>`; the arguments arrive as bound
-- integer parameters, and `this` is the slice under test.
SELECT count(*) AS row_count, $min AS min, $max AS max
FROM this
HAVING count(*) < $min OR count(*) > $max
