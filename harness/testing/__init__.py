"""What a test body calls, wherever the body runs (a rank process, a thread rank, the local-tensor
process): the decorators, ``run_subtests``, the assertions.

May import: harness.shared.
"""
