-- accepted_outcomes(accepted, corrected): a group's accepted outcomes, the tasks accepted as
-- they were or after a correction (docs/unit-economics.md). The unit-economics measures
-- (cost_per_accepted, acceptance_rate) and every query that shows the count use this one
-- definition.
CREATE OR REPLACE MACRO accepted_outcomes(m_accepted, m_corrected) AS m_accepted + m_corrected;
