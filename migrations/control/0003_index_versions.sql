-- The schedule version whose rows the index holds: a replace by an older
-- version (a write racing a newer one, a late repair) changes nothing.
CREATE TABLE index_versions (
    tenant      TEXT NOT NULL,
    schedule_id TEXT NOT NULL,
    version     BIGINT NOT NULL,
    PRIMARY KEY (tenant, schedule_id)
);
