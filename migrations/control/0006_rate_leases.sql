-- Leases on a limit's partitions: one row per (key, partition), taken,
-- renewed and given back only by conditional writes (toki_core::flow).
CREATE TABLE rate_leases (
    key TEXT NOT NULL,
    partition INTEGER NOT NULL,
    holder TEXT NOT NULL,
    expires_ms INTEGER NOT NULL,
    PRIMARY KEY (key, partition)
) WITHOUT ROWID;
