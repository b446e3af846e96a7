"""The harness's own suite: unittest discovery of tests/ finds the test modules, imports each, and no fixture.

pytest's collection of the same, which starts pytest, is in tests/test_pool.py.
"""
import os
import unittest

from tests._support import REPO, suite_modules


class TestSuiteCollection(unittest.TestCase):
    def test_unittest_discovery_finds_only_test_modules(self):
        loader = unittest.TestLoader()
        suite = loader.discover(os.path.join(REPO, "tests"), top_level_dir=REPO)
        self.assertEqual(loader.errors, [])
        modules = set()

        def walk(s):
            for t in s:
                if isinstance(t, unittest.TestSuite):
                    walk(t)
                else:
                    modules.add(type(t).__module__)

        walk(suite)
        self.assertEqual(modules, suite_modules())  # every test module, each with tests, and nothing else


if __name__ == "__main__":
    unittest.main()
