-- The embedded backend's control database (SQLite): tenant directory,
-- reminder index and delay queue. On AWS: DynamoDB tables and SQS queues.

CREATE TABLE tenants (
    id                TEXT PRIMARY KEY,
    reminders_enabled BOOLEAN NOT NULL,
    active            BOOLEAN NOT NULL,
    database          TEXT NOT NULL,
    api_key_sha256    TEXT NOT NULL
);

-- Same keys as the DynamoDB table: partition = due minute + shard, sort key
-- = zero-padded due millis + reminder identity.
CREATE TABLE reminder_index (
    partition      TEXT NOT NULL,
    sort_key       TEXT NOT NULL,
    tenant         TEXT NOT NULL,
    schedule_id    TEXT NOT NULL,
    occurrence     BIGINT NOT NULL,
    minutes_before INTEGER NOT NULL,
    due_at         BIGINT NOT NULL,
    version        BIGINT NOT NULL,
    recipients     TEXT NOT NULL,
    channels       TEXT NOT NULL,
    status         TEXT NOT NULL,
    lease_until    BIGINT,
    expires_at     BIGINT NOT NULL,
    PRIMARY KEY (partition, sort_key)
);
CREATE INDEX reminder_index_by_schedule ON reminder_index (tenant, schedule_id);

-- Delay queues (several by name): per-message visibility instant, receive
-- count, and a dead-letter flag instead of a second table.
CREATE TABLE queue_messages (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    queue         TEXT NOT NULL,
    body          TEXT NOT NULL,
    attributes    TEXT NOT NULL,
    sent_at       BIGINT NOT NULL,
    visible_at    BIGINT NOT NULL,
    receive_count INTEGER NOT NULL DEFAULT 0,
    dead          BOOLEAN NOT NULL DEFAULT FALSE,
    dead_at       BIGINT
);
CREATE INDEX queue_messages_visible ON queue_messages (queue, dead, visible_at);
