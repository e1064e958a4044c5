-- The audit log (docs/audit.md): who changed what in this tenant, and when.
-- Append-only; only the retention purge deletes. `resource` is a column of
-- its own so that erasing a user pseudonymises their entries with one UPDATE.

CREATE TABLE audit_log (
    seq            BIGINT PRIMARY KEY,
    at             BIGINT NOT NULL,
    actor          TEXT NOT NULL,
    action         TEXT NOT NULL,
    resource       TEXT,
    version_before BIGINT,
    version_after  BIGINT
);
CREATE INDEX audit_log_by_time ON audit_log (at);
CREATE INDEX audit_log_by_resource ON audit_log (resource);

-- The last number given: appending updates this row first, so on Postgres
-- concurrent appends take their numbers in commit order and a reader paging
-- with `after` never skips an entry that commits later.
CREATE TABLE audit_sequence (
    id   BIGINT PRIMARY KEY,
    last BIGINT NOT NULL
);
INSERT INTO audit_sequence (id, last) VALUES (1, 0);
