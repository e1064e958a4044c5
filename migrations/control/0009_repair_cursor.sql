-- Where the next repair pass starts (toki_core::repair): one row, the tenant
-- the last pass left first in line, so a pass cut short by its budget is
-- continued rather than begun again from the first tenant.
CREATE TABLE repair_cursor (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    next_tenant TEXT NOT NULL
);
