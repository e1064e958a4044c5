-- A tenant's reminder texts (`toki_core::template::ReminderTemplate`): one
-- per channel and locale; where a tenant has none, the built-in default.
CREATE TABLE reminder_templates (
    channel TEXT NOT NULL,
    locale TEXT NOT NULL,
    subject TEXT,
    text TEXT NOT NULL,
    html TEXT,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (channel, locale)
);
