"""Everything that reads or writes the database: the stores (users, sessions, prices,
deployments), the mart refresher and its steps, and the named queries each page runs."""
