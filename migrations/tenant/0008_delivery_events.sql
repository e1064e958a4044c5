-- Delivery events (docs/webhooks.md): the tenant's log in order of
-- occurrence, and the endpoints that receive it.

CREATE TABLE delivery_events (
    seq         BIGINT PRIMARY KEY,
    kind        TEXT NOT NULL,
    occurred_at BIGINT NOT NULL,
    data        TEXT NOT NULL
);
CREATE INDEX delivery_events_by_time ON delivery_events (occurred_at);

-- The last sequence number given. Appending updates this one row first, so
-- on Postgres concurrent appends take their numbers in commit order: a
-- reader never sees an event before every event numbered below it.
CREATE TABLE event_sequence (
    id   BIGINT PRIMARY KEY,
    last BIGINT NOT NULL
);
INSERT INTO event_sequence (id, last) VALUES (1, 0);

-- `disabled_reason` NULL: enabled. `previous_until` 0: no previous secret.
-- `holder`/`held_until`: the process sending to it (one per fleet).
-- `revision` counts writes: the sender's progress never undoes the tenant's.
CREATE TABLE event_endpoints (
    id              TEXT PRIMARY KEY,
    url             TEXT NOT NULL,
    kinds           TEXT NOT NULL,
    ordering        TEXT NOT NULL,
    secret          TEXT NOT NULL,
    previous_secret TEXT,
    previous_until  BIGINT NOT NULL,
    disabled_reason TEXT,
    cursor_seq      BIGINT NOT NULL,
    failures        BIGINT NOT NULL,
    next_attempt_at BIGINT NOT NULL,
    last_error      TEXT,
    revision        BIGINT NOT NULL,
    holder          TEXT NOT NULL,
    held_until      BIGINT NOT NULL,
    created_at      BIGINT NOT NULL
);
