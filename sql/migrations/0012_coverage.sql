-- Schema version 12: coverage as data (issue #10, §1). Time a self-hosted request ran with no
-- successful scrape behind it used to cost $0; it is now costed from the deployment's size and
-- GPU price and marked *estimated*, or marked *unpriced* when neither is known. Shares (usage,
-- busy) count GPU-seconds only inside scraped up time. See docs/cost-model.md, "Coverage".

-- mart_requests: how the request's cost was obtained, and how much of it is estimated.
--   measured   scraped up time at a known GPU price, or tokens x a model price (hosted)
--   estimated  some of its GPU time ran with no successful scrape: GPUs x $/GPU-hour x time
--   unpriced   some of it could not be costed (no model price, no GPU price or size, no replica)
ALTER TABLE mart_requests ADD COLUMN cost_basis VARCHAR DEFAULT 'measured';
ALTER TABLE mart_requests ADD COLUMN estimated_cost DOUBLE DEFAULT 0;

-- mart_request_pieces: the parts of a piece's GPU-seconds and cost outside scraped up time.
ALTER TABLE mart_request_pieces ADD COLUMN est_gpu_s DOUBLE DEFAULT 0;
ALTER TABLE mart_request_pieces ADD COLUMN est_cost DOUBLE DEFAULT 0;
ALTER TABLE mart_request_pieces ADD COLUMN unpriced_gpu_s DOUBLE DEFAULT 0;

-- mart_replica_hours: busy seconds with no successful scrape, costed (est_s, est_cost, part of
-- total_cost and usage_cost) or not (unpriced_s). up_s, busy_s, gpu_s and usage_gpu_s stay
-- scraped-up time only, so usage_gpu_s <= gpu_s.
ALTER TABLE mart_replica_hours ADD COLUMN est_s DOUBLE DEFAULT 0;
ALTER TABLE mart_replica_hours ADD COLUMN est_cost DOUBLE DEFAULT 0;
ALTER TABLE mart_replica_hours ADD COLUMN unpriced_s DOUBLE DEFAULT 0;

-- mart_spend_hourly: the part of cost that is estimated (same under every idle policy: estimated
-- time is never idle), and the requests by cost basis (on the requests-counting rows).
ALTER TABLE mart_spend_hourly ADD COLUMN estimated_cost DOUBLE DEFAULT 0;
ALTER TABLE mart_spend_hourly ADD COLUMN estimated_requests BIGINT DEFAULT 0;
ALTER TABLE mart_spend_hourly ADD COLUMN unpriced_requests BIGINT DEFAULT 0;

-- mart_coverage_hourly: one row per deployment x hour with a replica expected, scraped or busy.
-- expected_s: replica-seconds the deployment's replicas were known to run (their scraped
-- lifetime [first_seen, last_seen] from deployment_replicas, widened to any time they served
-- requests unscraped). scraped_s: of it, covered by scrapes (up or down). Coverage of a range
-- is sum(scraped_s) / sum(expected_s); an hour is incomplete when that is below 1 or
-- uncovered_requests > 0.
CREATE TABLE mart_coverage_hourly (
    hour                TIMESTAMPTZ NOT NULL,
    deployment          VARCHAR NOT NULL,
    replicas            INTEGER NOT NULL,
    expected_s          DOUBLE NOT NULL,
    scraped_s           DOUBLE NOT NULL,
    up_s                DOUBLE NOT NULL,
    est_s               DOUBLE NOT NULL,    -- busy with no successful scrape, costed
    unpriced_s          DOUBLE NOT NULL,    -- busy with no successful scrape and no GPU price
    requests            BIGINT NOT NULL,    -- requests that ran in the hour
    uncovered_requests  BIGINT NOT NULL,    -- ... part of it with no successful scrape
    estimated_cost      DOUBLE NOT NULL,
    unpriced_requests   BIGINT NOT NULL,    -- ... part of it not costable at all
    PRIMARY KEY (hour, deployment)
);

-- Every mart row written before this version lacks the new columns' values: recompute all
-- hours (the refresher treats missing watermarks as "everything is new").
DELETE FROM mart_refresh_state WHERE name IN ('spans_received', 'scrapes_received');
