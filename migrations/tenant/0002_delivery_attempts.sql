-- Failed attempts that count towards a delivery's failure budget (a throttle
-- answer or a send held back by an open circuit breaker does not count), and
-- whether its current claim took over from a holder that stopped renewing (its
-- send may have happened: the channel is asked before sending again).
ALTER TABLE deliveries ADD COLUMN failures BIGINT NOT NULL DEFAULT 0;
ALTER TABLE deliveries ADD COLUMN taken_over BOOLEAN NOT NULL DEFAULT FALSE;
-- A live holder renews its claims by token every few seconds.
CREATE INDEX deliveries_by_claim ON deliveries (claim_token) WHERE status = 'sending';
