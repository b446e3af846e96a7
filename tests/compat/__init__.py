"""Upstream idioms, one module each: fixtures (cx_*.py) run as a user would, and the tests that check them."""
