-- by_idle_policy(policy, if_separate, if_usage, if_even, if_configured): the value that goes
-- with an idle policy (docs/cost-model.md, "Idle policy"; models/idle_policy.py): one of the
-- three a deployment can have, or 'configured' (each deployment's own, already resolved into
-- the *_configured columns). Every query, view macro and mart that picks a cost by the policy
-- picks through this one macro. Callers pass validated policies; a deployment's own policy
-- (never 'configured') passes its `separate` value as if_configured, so NULL means separate.
CREATE OR REPLACE MACRO by_idle_policy(p_policy, if_separate, if_usage, if_even, if_configured) AS
    case p_policy
        when 'separate' then if_separate
        when 'usage' then if_usage
        when 'even' then if_even
        else if_configured
    end;
