"""Logic SQL does not express well: allocation, economics, the serving simulator, planning."""
