-- One tenant's database. Portable SQL: runs on Postgres and SQLite.
-- Instants are UTC milliseconds since the epoch.

CREATE TABLE users (
    id            TEXT PRIMARY KEY,
    name          TEXT NOT NULL,
    email         TEXT,
    slack_user_id TEXT,
    time_zone     TEXT NOT NULL,
    locale        TEXT NOT NULL,
    updated_at    BIGINT NOT NULL
);

CREATE TABLE schedules (
    id         TEXT PRIMARY KEY,
    title      TEXT NOT NULL,
    body       TEXT NOT NULL,
    starts_at  BIGINT NOT NULL,
    time_zone  TEXT NOT NULL,
    version    BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

-- Membership rows, not a list on the schedule row.
CREATE TABLE participants (
    schedule_id TEXT NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
    user_id     TEXT NOT NULL REFERENCES users (id),
    position    BIGINT NOT NULL,
    PRIMARY KEY (schedule_id, user_id)
);
CREATE INDEX participants_by_user ON participants (user_id);

CREATE TABLE reminder_rules (
    schedule_id    TEXT NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
    minutes_before BIGINT NOT NULL,
    channels       TEXT NOT NULL,
    PRIMARY KEY (schedule_id, minutes_before)
);

-- What the reminder index must reflect. Written in the same transaction as the
-- schedule; `mirrored` turns true once the index has it, so a failed mirror is
-- repaired, not lost. The row outlives a delete so versions never repeat.
CREATE TABLE schedule_mirror (
    schedule_id TEXT PRIMARY KEY,
    version     BIGINT NOT NULL,
    deleted     BOOLEAN NOT NULL,
    mirrored    BOOLEAN NOT NULL,
    changed_at  BIGINT NOT NULL
);
CREATE INDEX schedule_mirror_unmirrored ON schedule_mirror (mirrored);

-- One row per (reminder instance, recipient, channel): the record of every
-- delivery, and the unique key that keeps a redelivered message from sending
-- twice. The schedule version is a column, not part of the key: an edit after a
-- reminder went out must not send it again. `claim_token` names the batch that
-- holds a `sending` claim.
CREATE TABLE deliveries (
    schedule_id    TEXT NOT NULL,
    occurrence     BIGINT NOT NULL,
    minutes_before BIGINT NOT NULL,
    version        BIGINT NOT NULL,
    recipient      TEXT NOT NULL,
    channel        TEXT NOT NULL,
    status         TEXT NOT NULL,
    due_at         BIGINT NOT NULL,
    claimed_at     BIGINT,
    finished_at    BIGINT,
    attempts       BIGINT NOT NULL,
    detail         TEXT,
    claim_token    TEXT,
    PRIMARY KEY (schedule_id, occurrence, minutes_before, recipient, channel)
);
CREATE INDEX deliveries_by_status ON deliveries (channel, status);

-- The in-app chat channel: a message row per delivery.
CREATE TABLE chat_messages (
    schedule_id    TEXT NOT NULL,
    occurrence     BIGINT NOT NULL,
    minutes_before BIGINT NOT NULL,
    version        BIGINT NOT NULL,
    user_id        TEXT NOT NULL,
    body           TEXT NOT NULL,
    created_at     BIGINT NOT NULL,
    PRIMARY KEY (schedule_id, occurrence, minutes_before, user_id)
);
CREATE INDEX chat_messages_by_user ON chat_messages (user_id, created_at);
