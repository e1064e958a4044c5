-- Retention (toki_core::retention). The purge deletes finished delivery rows
-- and chat messages older than the tenant's settings, in bounded batches,
-- oldest first: these indexes keep each batch from reading the whole table.
CREATE INDEX deliveries_by_finish ON deliveries (finished_at);
CREATE INDEX chat_messages_by_time ON chat_messages (created_at);

-- What the last purge pass did per kind (what `toki report` shows): when it
-- ran, the cutoff it used, what it deleted, and the total since this row began.
CREATE TABLE purge_log (
    kind         TEXT PRIMARY KEY,
    last_pass_at BIGINT NOT NULL,
    cutoff       BIGINT NOT NULL,
    last_purged  BIGINT NOT NULL,
    total_purged BIGINT NOT NULL
);
