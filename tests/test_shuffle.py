"""``run_tests.py --shuffle [SEED]``: a random order that keeps each class together and reproduces by seed."""
import subprocess
import sys
import unittest

from tests._support import nightly, REPO, base_env


def listed(*args: str) -> tuple[list[str], str]:
    r = subprocess.run([sys.executable, "run_tests.py", "--all", "--list", *args], cwd=REPO, env=base_env(),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout.split(), r.stderr


@nightly("--shuffle's order by the unit tests of selection")
class TestShuffle(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.plain, _ = listed()
        cls.first, cls.note = listed("--shuffle", "7")
        cls.again, _ = listed("--shuffle", "7")
        cls.other, _ = listed("--shuffle", "8")
        cls.random, cls.random_note = listed("--shuffle")

    def test_same_tests(self):
        for order in (self.first, self.other, self.random):
            self.assertEqual(sorted(order), sorted(self.plain))

    def test_order_changes_and_the_seed_reproduces_it(self):
        self.assertNotEqual(self.first, self.plain)
        self.assertNotEqual(self.first, self.other)
        self.assertEqual(self.first, self.again)
        self.assertIn("shuffled with seed 7 (--shuffle 7 runs this order again)", self.note)
        self.assertRegex(self.random_note, r"shuffled with seed \d+")

    def test_each_class_stays_together(self):
        for order in (self.first, self.other, self.random):
            classes = [t.rsplit(".", 1)[0] for t in order]
            runs = [c for i, c in enumerate(classes) if i == 0 or classes[i - 1] != c]
            self.assertEqual(len(runs), len(set(runs)), "a class's tests were split apart")


if __name__ == "__main__":
    unittest.main()
