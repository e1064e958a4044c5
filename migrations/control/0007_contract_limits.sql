-- A tenant's contract limits (toki_core::flow::ContractLimits) as JSON;
-- NULL means none (the configured limits apply).
ALTER TABLE tenants ADD COLUMN limits TEXT;
