"""orch: choose, prove and hand over the parallel serving layout of an LLM."""

__version__ = "0.1.0"
