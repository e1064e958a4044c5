-- Every delivery row is written twice at a burst, by its claim and by its
-- outcome, and each index on `deliveries` is written with it. Two indexes
-- did not earn that:
-- - (channel, status) served only the report's counts, which read every row
--   either way;
-- - a claim's new row (finished_at still NULL) was entered in the purge's
--   index, which only ever looks for finished rows (`finished_at < cutoff`).
DROP INDEX deliveries_by_status;
DROP INDEX deliveries_by_finish;
CREATE INDEX deliveries_by_finish ON deliveries (finished_at) WHERE finished_at IS NOT NULL;
