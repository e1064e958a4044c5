-- A replay's end (docs/events.md): an endpoint's events up to this sequence
-- number are being sent again, at the tenant's replay rate. 0: no replay.
ALTER TABLE event_endpoints ADD COLUMN replay_through BIGINT NOT NULL DEFAULT 0;
