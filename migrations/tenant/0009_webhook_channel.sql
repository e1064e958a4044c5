-- The webhook channel: a user's own endpoint, and the tenant's default
-- endpoint with its signing secrets (`toki_model::webhook::WebhookSettings`).
-- The secrets are kept as the tenant was shown them (`whsec_…`): HMAC needs
-- the key itself, not a digest of it.
ALTER TABLE users ADD COLUMN webhook_url TEXT;

-- One row at most (id = 1).
CREATE TABLE webhook_settings (
    id              BIGINT PRIMARY KEY CHECK (id = 1),
    default_url     TEXT,
    secret          TEXT NOT NULL,
    -- The secret rotated out, signing beside the new one until previous_until (ms).
    previous_secret TEXT,
    previous_until  BIGINT,
    updated_at      BIGINT NOT NULL
);
