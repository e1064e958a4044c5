-- Index rows and queue messages no longer carry the recipients: the daemon
-- reads a schedule's participants at the message's version from the tenant
-- database, so a row stays small however large the meeting.
ALTER TABLE reminder_index DROP COLUMN recipients;
