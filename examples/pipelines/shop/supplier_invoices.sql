-- pipeline
-- on email name=invoices
-- materialize ducklake://main/supplier_invoices append
-- data_test not_null sender
-- tag streaming
-- owner team:finance
--
-- Supplier invoices, one row per mail to the invoices mailbox.
-- Mail to invoices@ (any domain) reaches the e-mail receiver
-- (`lineage-defs email serve`, which make demo starts on port 2525): a row
-- per message, with its sender, subject, date and how many attachments
-- (and bytes) it carried. A resend with the same Message-ID is
-- stored once; mail for an unknown mailbox is refused.
SELECT
    json_extract_string(value, '$.from') AS sender,
    json_extract_string(value, '$.subject') AS subject,
    TRY_CAST(json_extract_string(value, '$.date') AS TIMESTAMPTZ) AS sent_at,
    json_extract_string(value, '$.message_id') AS message_id,
    json_array_length(json_extract(value, '$.attachments')) AS attachments,
    coalesce(CAST(json_extract(value, '$.attachments[*].size') AS BIGINT[]), []) AS attachment_bytes
FROM _events
