-- Recurring schedules. `recurrence` is the series as validated (the RRULE,
-- EXDATEs, local start, DST policy and single-occurrence exceptions) as JSON,
-- NULL for a one-off: it is always expanded again, never stored expanded.
ALTER TABLE schedules ADD COLUMN recurrence TEXT;

-- How far ahead (due instants, UTC ms) the index holds a series' reminders;
-- NULL for a one-off, whose reminders are all mirrored at once. A repair pass
-- extends series whose horizon runs short.
ALTER TABLE schedule_mirror ADD COLUMN mirrored_until BIGINT;
CREATE INDEX schedule_mirror_until ON schedule_mirror (mirrored_until);
