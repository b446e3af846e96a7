"""The suites' own test bodies re-hosted on torch.testing._internal's MultiProcessTestCase (benchmark only).

``tools/bench_suite.py`` times the same work under both harnesses. To compare harnesses and not test
code, the baseline runs *our* test methods unchanged, on upstream's spawn-per-test
``MultiProcessTestCase`` adapted to CPU/gloo the way an upstream user would do it by hand: a FileStore
process group made in each rank, a shared temp dir, hypothesis run inside each rank (with the
derandomized ``ci`` profile every rank draws the same examples), and ``run_subtests`` as upstream's
plain loop. The modules to re-host come from ``HARNESS_BASELINE_MODULES`` so that the spawned rank
processes, which re-import this module by name, build the same classes.
"""
from __future__ import annotations

import importlib
import inspect
import itertools
import os
import shutil
import tempfile
import unittest

import torch.distributed as dist
from torch.testing._internal.common_distributed import MultiProcessTestCase as UpstreamMultiProcessTestCase

import harness
from harness.testing.decorators import markers
from harness.parent.hypothesis_support import load_profile


def _run_subtests(self, config, fn, *args, **kwargs):
    """Upstream's run_subtests: every combination in turn; a skipped combination skips only itself."""
    keys = list(config)
    for values in itertools.product(*(config[k] for k in keys)):
        try:
            fn(*args, **kwargs, **dict(zip(keys, values)))
        except unittest.SkipTest:
            pass
        dist.barrier()


class _UpstreamAdapter(UpstreamMultiProcessTestCase):
    # torch's TestCase.run ends in super().run(), which would reach the harness's run() next in the MRO;
    # this flag makes that one step straight through to unittest's, so upstream alone drives the test.
    _harness_in_rank = True

    def setUp(self) -> None:
        super().setUp()
        self._spawn_processes()

    def run_test(self, test_name: str, parent_pipe) -> None:  # runs in each spawned rank
        self._harness_device_type = "cpu"
        dist.init_process_group("gloo", init_method=f"file://{self.file_name}", rank=self.rank,
                                world_size=self.world_size)
        self.temp_dir = self.file_name + ".dir"
        os.makedirs(self.temp_dir, exist_ok=True)
        load_profile()
        from hypothesis import settings

        fn = getattr(type(self), test_name)
        hyp = getattr(fn, "hypothesis", None)
        if hyp is not None and not getattr(fn, "_hypothesis_internal_settings_applied", False):
            fn._hypothesis_internal_use_settings = settings.default
        if hyp is not None and markers(fn)["temp_dir"]:
            # Upstream's with_temp_dir sits under @given, so every example gets a fresh directory that
            # rank 0 makes and broadcasts; do the same around each example here.
            inner = hyp.inner_test

            def fresh_dir_per_example(*args, **kwargs):
                test = args[0] if args else kwargs["self"]
                box = [tempfile.mkdtemp() if test.rank == 0 else None]
                dist.broadcast_object_list(box)
                test.temp_dir = box[0]
                try:
                    return inner(*args, **kwargs)
                finally:
                    dist.barrier()
                    if test.rank == 0:
                        shutil.rmtree(box[0], ignore_errors=True)

            hyp.inner_test = fresh_dir_per_example
        try:
            super().run_test(test_name, parent_pipe)
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()

    run_subtests = _run_subtests


def _rehost(cls: type) -> type:
    namespace = {"__module__": __name__, "__qualname__": "Upstream" + cls.__name__,
                 "world_size": inspect.getattr_static(cls, "world_size"),
                 "backend": property(lambda self: "gloo")}
    return type("Upstream" + cls.__name__, (_UpstreamAdapter, cls), namespace)


for _module_name in filter(None, os.environ.get("HARNESS_BASELINE_MODULES", "").split(",")):
    _module = importlib.import_module(_module_name)
    for _name, _obj in vars(_module).items():
        if (isinstance(_obj, type) and issubclass(_obj, harness.MultiProcessTestCase)
                and _obj.__module__ == _module.__name__ and any(n.startswith("test") for n in dir(_obj))):
            _new = _rehost(_obj)
            globals()[_new.__name__] = _new
# Leave no other TestCase at module level: unittest would collect it here and run it on our harness.
for _leftover in ("_module_name", "_module", "_name", "_obj", "_new"):
    globals().pop(_leftover, None)
