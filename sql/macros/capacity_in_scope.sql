-- capacity_in_scope(app, route, environment, apps, routes, env): whether a row is in the
-- capacity planner's scope: its app (NULL as '(none)') in the apps list, its route in the
-- routes list, its environment env; an empty list and a NULL env mean all
-- (ledger/capacity_profile.py; sql/capacity/*.sql).
CREATE OR REPLACE MACRO capacity_in_scope(m_app, m_route, m_environment, m_apps, m_routes, m_env) AS
    (len(m_apps) = 0 or list_contains(m_apps, coalesce(m_app, '(none)')))
    and (len(m_routes) = 0 or list_contains(m_routes, m_route))
    and (m_env is null or m_environment = m_env);
