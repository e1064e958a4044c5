-- The tenant's suppression list (`toki_model::suppression`): addresses not
-- mailed again, keyed lower-cased, with why and since when. And its mail
-- settings: the `List-Unsubscribe` on its reminder mail (one row at most).
CREATE TABLE suppressed_addresses (
    address    TEXT PRIMARY KEY,
    reason     TEXT NOT NULL,
    detail     TEXT,
    created_at BIGINT NOT NULL
);

CREATE TABLE mail_settings (
    id                 BIGINT PRIMARY KEY CHECK (id = 1),
    unsubscribe_url    TEXT,
    unsubscribe_mailto TEXT,
    updated_at         BIGINT NOT NULL
);
