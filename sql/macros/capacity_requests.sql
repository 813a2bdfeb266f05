-- capacity_requests(start, end, apps, routes, env): the rows of mart_requests that started in
-- [start, end) inside the capacity planner's scope (capacity_in_scope), with a NULL app as
-- '(none)'. Every profile query of sql/capacity reads through it, so they measure alike.
CREATE OR REPLACE MACRO capacity_requests(p_start, p_end, p_apps, p_routes, p_env) AS TABLE
select coalesce(app, '(none)') as app, * exclude (app)
from mart_requests
where hour >= date_trunc('hour', p_start) and hour < p_end
    and start_time >= p_start and start_time < p_end
    and capacity_in_scope(app, route, environment, p_apps, p_routes, p_env);
