-- Idempotent writes (`Idempotency-Key`): per key, a digest of the request
-- that first used it (method, path, body; never the request itself), when it
-- started, and, once it finished, its answer (status and JSON body), which a
-- repeat of the request gets back. `status` is NULL while it is in progress.
-- Keys older than a day are purged in bounded batches, oldest first.
CREATE TABLE idempotency_keys (
    idem_key   TEXT PRIMARY KEY,
    digest     TEXT NOT NULL,
    started_at BIGINT NOT NULL,
    status     BIGINT,
    body       TEXT
);

CREATE INDEX idempotency_keys_started_at ON idempotency_keys (started_at);
