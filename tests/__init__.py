"""The harness's own test suite: runs the fixture modules in tests/fixtures as a user would."""
