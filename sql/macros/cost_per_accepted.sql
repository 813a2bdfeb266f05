-- cost_per_accepted(cost, accepted, corrected): cost per accepted outcome of a group of tasks,
-- from its sums (docs/unit-economics.md); NULL when nothing was accepted. `cost` is the total
-- under the idle policy the caller picked (pass `accepted, 0` for the strict measure, accepted
-- only). outcome_economics and the Unit economics page's queries all use it.
CREATE OR REPLACE MACRO cost_per_accepted(m_cost, m_accepted, m_corrected) AS
    m_cost / nullif(accepted_outcomes(m_accepted, m_corrected), 0);
