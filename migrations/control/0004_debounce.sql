-- Debounce state: one row per key, changed only by compare-and-set on its
-- token (toki_core::debounce).
CREATE TABLE debounce (
    key TEXT PRIMARY KEY NOT NULL,
    token TEXT NOT NULL,
    burst_started_ms INTEGER NOT NULL,
    last_call_ms INTEGER NOT NULL,
    delay_ms INTEGER NOT NULL,
    pending INTEGER NOT NULL
) WITHOUT ROWID;
