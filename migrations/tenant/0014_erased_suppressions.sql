-- Erased people's suppression entries (docs/erasure.md): the address is
-- gone, a keyed hash of it stays (HMAC-SHA-256, 64 hex digits), so that the
-- address added again is suppressed again. No detail: a bounce's text can
-- quote the address.
CREATE TABLE erased_suppressions (
    digest     TEXT PRIMARY KEY,
    reason     TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    erased_at  BIGINT NOT NULL
);

-- The tenant's own secrets, made at first use (`suppression_hash_key`: the
-- key of those hashes). They go with the database when the tenant is deleted.
CREATE TABLE tenant_secrets (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
