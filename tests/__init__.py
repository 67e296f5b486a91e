"""The test tree is a package so that pytest does not put tests/ itself on sys.path.

Without this file pytest's default import mode inserts the directory of tests/conftest.py
(tests/) at the front of sys.path, and tests/ballast/ — the tests of the `ballast` package — then
shadows that package as an empty namespace package (the editable install's finder comes after the
path finder). As a package, tests/ is imported from the repository root instead, and test helpers
stay importable as `tests.helpers.<module>`.
"""
