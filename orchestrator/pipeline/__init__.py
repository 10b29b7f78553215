"""The sweep pipeline: plan, compile, deploy, measure, store and select, one layout at a time."""
