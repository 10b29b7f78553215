"""Calibration: fit the cost model's guessed constants to stored measurements (orch calibrate)."""
