"""Upstream's test-helper modules by name: one module here for each ``torch.testing._internal`` module real
distributed test files import, offering the harness's counterpart of each name they take from it
(``harness.upstream_modules.common_utils.SEED``, ``harness.upstream_modules.common_fsdp.patch_all_gather``, ...).
``python -m harness.port`` rewrites ``from torch.testing._internal import common_utils`` and
``import torch.testing._internal.common_fsdp as cf`` to these; each module's ``__all__`` is what it offers.

May import: harness.shared, harness.testing, harness.classes, harness.inprocess, and of the top level
harness.models (the test models) and harness.main (``run_tests``).
"""
