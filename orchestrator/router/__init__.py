"""The prefill/decode router: one OpenAI-compatible endpoint in front of a prefill pool and a decode pool.

`python -m orchestrator.router` (router/server.py); the per-engine protocols are in router/protocol.py.
"""
