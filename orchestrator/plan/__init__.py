"""Cost model (pure functions) and the planner."""
