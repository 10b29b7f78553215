"""`orch consistency`: do two layouts give the same outputs? Estimators, client calls, the runner."""
