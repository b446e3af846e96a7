"""skip_if_lt_x_gpu on a class the harness does not run: an error when the module is imported."""
import unittest

from harness import skip_if_lt_x_gpu


@skip_if_lt_x_gpu(2)
class TestPlain(unittest.TestCase):
    def test_x(self):
        pass
