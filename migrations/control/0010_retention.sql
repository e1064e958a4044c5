-- A tenant's retention settings (toki_model::retention::RetentionSettings)
-- as JSON; NULL on rows from before there were any (the defaults apply).
ALTER TABLE tenants ADD COLUMN retention TEXT;

-- The purge deletes expired index rows in bounded batches, oldest first.
CREATE INDEX reminder_index_by_expiry ON reminder_index (expires_at);
