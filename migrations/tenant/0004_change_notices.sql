-- Change notices (toki_core::change). Per schedule, the state its participants
-- last heard of, as JSON (NULL once they heard it was cancelled): taken just
-- before its first edit, then advanced by every notice. `revision` is bumped
-- first by every freeze, so concurrent freezes of one schedule queue on the row.
CREATE TABLE change_baselines (
    schedule_id    TEXT PRIMARY KEY,
    snapshot       TEXT,
    revision       BIGINT NOT NULL,
    last_notice_at BIGINT NOT NULL
);

-- One row per notice (per debounce edge), keyed by the edge's token: what it
-- says is fixed when it is frozen, so a message received twice tells the same.
CREATE TABLE change_notices (
    schedule_id     TEXT NOT NULL,
    token           TEXT NOT NULL,
    edge            TEXT NOT NULL,
    at              BIGINT NOT NULL,
    before_snapshot TEXT,
    after_snapshot  TEXT,
    PRIMARY KEY (schedule_id, token)
);
