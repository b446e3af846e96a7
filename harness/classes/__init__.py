"""The test classes a test module derives from: ``MultiProcessTestCase``, ``FSDPTest``,
``DTensorTestBase``, the continuous and sharded-tensor classes. In the parent a test goes to
``harness.parent.testrun``; in a rank its body runs.

May import: harness.shared, harness.testing, harness.judging, harness.parent.
"""
