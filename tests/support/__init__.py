"""Helpers the tests share: servers on 127.0.0.1, fixtures' building blocks, child-process scripts.

Import as `tests.support.<module>`. Test files never import from each other; what two of them need
lives here (or, as a fixture, in tests/conftest.py)."""
