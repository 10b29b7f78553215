"""The simulated engine: a continuous-batching model in virtual time and an OpenAI server on top."""
