"""The results store: one SQLite file with runs, layouts, load points, metrics and request records."""
