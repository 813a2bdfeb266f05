-- acceptance_rate(tasks, accepted, corrected, pending): the share of a group's decided tasks
-- (all but the pending ones) that are accepted outcomes (docs/unit-economics.md); NULL when
-- none is decided. outcome_economics and the Unit economics page's queries all use it.
CREATE OR REPLACE MACRO acceptance_rate(m_tasks, m_accepted, m_corrected, m_pending) AS
    accepted_outcomes(m_accepted, m_corrected) / nullif(m_tasks - m_pending, 0);
