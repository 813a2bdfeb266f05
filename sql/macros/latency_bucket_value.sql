-- latency_bucket_value(bucket, min_s, max_s): the value that answers for a latency histogram
-- bucket (mart_latency_buckets; 48 buckets a decade from 1 ms, 0 below 1 ms, 289 from 1000 s):
-- 2·lo·hi / (lo + hi), within 2.4 % of any value in the bucket (docs/efficiency.md), kept inside
-- the smallest and largest value the bucket really holds. Every percentile read from the
-- histograms uses it (latency_percentiles_over, slo_attainment_between, sql/queries/).
CREATE OR REPLACE MACRO latency_bucket_value(bucket, min_s, max_s) AS
    least(greatest(
        case
            when bucket = 0 then 0
            when bucket = 289 then max_s
            else 2 * 0.001 * pow(10, (bucket - 1) / 48.0) * 0.001 * pow(10, bucket / 48.0)
                / (0.001 * pow(10, (bucket - 1) / 48.0) + 0.001 * pow(10, bucket / 48.0))
        end,
        min_s), max_s);
