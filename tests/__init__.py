"""orch's tests. A package so that `tests.support` imports the same way from every test folder, from
conftest.py and from child processes given PYTHONPATH (pyproject's pytest `pythonpath` puts the
repository root on sys.path; nothing edits sys.path by hand)."""
