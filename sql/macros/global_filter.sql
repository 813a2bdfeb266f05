-- global_filter(environment, team, app, route, model,
--               f_environment, f_team, f_app, f_route, f_model): whether a row with these keys
-- passes the dashboard's global filters (app/filters.py): each filter that is set (not NULL)
-- must equal the row's key; an unset one matches everything, NULL keys included. Every named
-- query reads the filters through this one macro. A source without one of the keys passes
-- NULL for that filter (and applies it its own way, e.g. a team through the routes it used).
CREATE OR REPLACE MACRO global_filter(
    r_environment, r_team, r_app, r_route, r_model,
    f_environment, f_team, f_app, f_route, f_model
) AS
    (f_environment is null or r_environment = f_environment)
    and (f_team is null or r_team = f_team)
    and (f_app is null or r_app = f_app)
    and (f_route is null or r_route = f_route)
    and (f_model is null or r_model = f_model);
