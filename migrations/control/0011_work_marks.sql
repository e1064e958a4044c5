-- Work marks (toki_ports::marks): a tenant has delivery events, a repair or
-- a retention purge waiting from `due_ms` on. The passes read the marks due
-- and visit those tenants only; `revision` is bumped by every marking, so a
-- pass settles only what it read.
CREATE TABLE work_marks (
    kind TEXT NOT NULL,
    tenant TEXT NOT NULL,
    due_ms INTEGER NOT NULL,
    revision INTEGER NOT NULL,
    PRIMARY KEY (kind, tenant)
) WITHOUT ROWID;
CREATE INDEX work_marks_due ON work_marks (kind, due_ms);

-- Tenants from before the marks: each is looked at once by the repair and
-- the retention purge, which settle its marks from what it holds.
INSERT INTO work_marks (kind, tenant, due_ms, revision)
    SELECT 'repair', id, 0, 1 FROM tenants;
INSERT INTO work_marks (kind, tenant, due_ms, revision)
    SELECT 'retention', id, 0, 1 FROM tenants;
