-- A tenant's API keys (toki_model::api_key::ApiKey) as JSON: name, SHA-256,
-- created, expiry, revocation. NULL on rows written before: their one key is
-- api_key_sha256, read as the key named `default`. Rows written since keep
-- api_key_sha256 empty, so that an older binary rejects their keys (fails
-- closed) rather than ignore a revocation.
ALTER TABLE tenants ADD COLUMN api_keys TEXT;
