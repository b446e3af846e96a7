"""harness.upstream_modules against the installed torch.testing._internal: the same models (keys, shapes, seeded
weights, outputs), tables and flags, the same generated test names, the same collectives seen by the FSDP2
patches, the same state-dict verdicts. Each check runs in this process (a one-rank group where one is needed)."""
from __future__ import annotations

import functools
import logging
import unittest

import torch
import torch.distributed as dist

from harness.upstream_modules import (common_cuda, common_device_type, common_dist_composable, common_distributed,
                                      common_dtensor, common_fsdp, common_state_dict, common_utils, distributed_utils,
                                      inductor_utils, logging_utils, shard_test_common, st_common, st_ops_common,
                                      triton_utils,
                                      two_tensor)
from tests._support import base_env, nightly, run_fixture
from tests.unit._fakes import InFakeGroup


def _same_module(test: unittest.TestCase, theirs: torch.nn.Module, mine: torch.nn.Module) -> None:
    a, b = theirs.state_dict(), mine.state_dict()
    test.assertEqual(list(a), list(b))
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=0, atol=0)
    test.assertEqual([n for n, _ in theirs.named_modules()], [n for n, _ in mine.named_modules()])


class TestModels(unittest.TestCase):
    def test_composable_models_draw_upstreams_weights_and_outputs(self):
        from torch.testing._internal import common_dist_composable as up

        for name in ("UnitModule", "CompositeModel", "UnitParamModule", "CompositeParamModel"):
            with self.subTest(name):
                torch.manual_seed(3)
                theirs = getattr(up, name)(torch.device("cpu"))
                torch.manual_seed(3)
                mine = getattr(common_dist_composable, name)(torch.device("cpu"))
                _same_module(self, theirs, mine)
                x = torch.randn(4, 100)
                torch.testing.assert_close(mine(x), theirs(x), rtol=0, atol=0)

    def test_nested_sequential_model(self):
        from torch.testing._internal import common_dist_composable as up

        torch.manual_seed(5)
        theirs = up.NestedSequentialModel(torch.device("cpu"))
        torch.manual_seed(5)
        mine = common_dist_composable.NestedSequentialModel(torch.device("cpu"))
        _same_module(self, theirs, mine)
        self.assertEqual(mine(torch.randn(3, 1)).shape, (3, 4))  # upstream's cannot be called (see its docstring)
        seq = common_dist_composable.FakeSequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
        self.assertEqual(list(seq.named_children()), list(up.FakeSequential(torch.nn.ReLU()).named_children()))

    def test_fusion_embeddings_keys_and_loading(self):
        from torch.testing._internal.distributed import common_state_dict as up

        for name in ("FusionEmbedding", "FusionEmbeddingWithHook", "FusionEmbeddingWithModifier"):
            with self.subTest(name):
                torch.manual_seed(0)
                theirs = getattr(up, name)(8, 4, 3)
                torch.manual_seed(0)
                mine = getattr(common_state_dict, name)(8, 4, 3)
                _same_module(self, theirs, mine)
                mine.load_state_dict(theirs.state_dict())
                self.assertEqual(getattr(mine, "_fqn_modifiers", lambda: None)(),
                                 getattr(theirs, "_fqn_modifiers", lambda: None)())

    def test_sharded_tensor_models_and_specs(self):
        from torch.testing._internal.distributed._shard.sharded_tensor import _test_st_common as up

        original = list(up.PLACEMENTS)
        try:
            up.PLACEMENTS[:] = st_common.PLACEMENTS[:] = [f"rank:{r}/cuda:{r}" for r in range(4)]
            for _ in range(2):  # the second call starts from the order the first left, as upstream's
                theirs = up._chunk_sharding_specs_list_for_test([0, 1, 0], seed=7)
                mine = st_common._chunk_sharding_specs_list_for_test([0, 1, 0], seed=7)
                self.assertEqual([(s.dim, [str(p) for p in s.placements]) for s in theirs],
                                 [(s.dim, [str(p) for p in s.placements]) for s in mine])
        finally:
            up.PLACEMENTS[:] = original
        self.assertEqual(st_common.DEFAULT_GPU_NUM, up.DEFAULT_GPU_NUM)
        torch.manual_seed(1)
        theirs_model = up.MyShardedModel1()
        torch.manual_seed(1)
        _same_module(self, theirs_model, st_common.MyShardedModel1())

    def test_simple_megatron_lm_is_upstreams(self):
        from torch.testing._internal.distributed._shard import test_common as up

        for dtype in (torch.float32, torch.float64):
            with self.subTest(dtype=dtype):
                models = []
                for cls in (up.SimpleMegatronLM, shard_test_common.SimpleMegatronLM):
                    torch.manual_seed(5)
                    models.append(cls([[17, 12], [12, 29]], dtype=dtype))
                theirs, mine = models
                _same_module(self, theirs, mine)
                x = torch.randn(3, 17, dtype=dtype)
                outs = [m(x) for m in models]
                torch.testing.assert_close(outs[1], outs[0], rtol=0, atol=0)
                for out in outs:
                    out.sum().backward()
                for getter in ("get_weights", "get_biases", "get_weight_grads", "get_bias_grads"):
                    for a, b in zip(getattr(theirs, getter)(), getattr(mine, getter)()):
                        torch.testing.assert_close(b, a, rtol=0, atol=0)
        if not torch.cuda.is_available():  # a rank puts it on cuda:<rank>, as upstream's
            with self.assertRaises((AssertionError, RuntimeError)):
                shard_test_common.SimpleMegatronLM([[2, 2], [2, 2]], rank=0)

    def test_two_tensor_runs_every_op_on_both(self):
        from torch.testing._internal.two_tensor import TwoTensor as Theirs

        Mine = two_tensor.TwoTensor
        a, b = torch.randn(3, 4), torch.randn(3, 4)
        for op in (lambda t: t + 1, lambda t: t.t(), lambda t: (t * 2).sum(0), lambda t: t.view(12)[2:5],
                   lambda t: torch.nn.functional.relu(t)):
            theirs, mine = op(Theirs(a, b)), op(Mine(a, b))
            self.assertIs(type(mine), Mine)
            torch.testing.assert_close(mine.a, theirs.a, rtol=0, atol=0)
            torch.testing.assert_close(mine.b, theirs.b, rtol=0, atol=0)
            self.assertEqual((mine.shape, mine.stride()), (theirs.shape, theirs.stride()))
        t = Mine(a, b)
        self.assertEqual(t.__tensor_flatten__(), Theirs(a, b).__tensor_flatten__())
        view = t.view(12)
        view.add_(1)  # a view shares the storage of both halves
        torch.testing.assert_close(t.b, b)
        self.assertIs(t.b, b)
        self.assertEqual(repr(Mine(torch.ones(1), torch.zeros(1))), "TwoTensor(tensor([1.]), tensor([0.]))")
        with self.assertRaisesRegex(AssertionError, "same device, layout, requires_grad, and dtype"):
            Mine(torch.ones(2), torch.ones(2, dtype=torch.float64))
        grads = []
        for cls in (Mine, Theirs):
            leaf = cls(torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True))
            (leaf * 3).sum().backward()
            grads.append(leaf.grad)
        self.assertIs(type(grads[0]), Mine)  # the gradient of a TwoTensor is one, as upstream's
        torch.testing.assert_close(grads[0].b, grads[1].b, rtol=0, atol=0)


class TestTablesAndFlags(unittest.TestCase):
    def test_flags_and_seed_are_upstreams(self):
        from torch.testing._internal import common_utils as up

        for name in ("SEED", "IS_FBCODE", "IS_SANDCASTLE", "IS_WINDOWS", "IS_LINUX", "IS_MACOS", "TEST_HPU", "TEST_XPU",
                     "TEST_CUDA", "TEST_WITH_ROCM", "TEST_WITH_ASAN", "TEST_WITH_TSAN", "TEST_WITH_DEV_DBG_ASAN",
                     "TEST_WITH_TORCHDYNAMO", "TEST_WITH_TORCHINDUCTOR", "TEST_WITH_SLOW", "TEST_WITH_UBSAN",
                     "NO_MULTIPROCESSING_SPAWN", "MI300_ARCH"):
            with self.subTest(name):
                theirs = getattr(up, name)
                self.assertEqual(getattr(common_utils, name), theirs if name in ("SEED", "MI300_ARCH")
                                 else bool(theirs))

    def test_skip_table_is_upstreams(self):
        from torch.testing._internal.common_distributed import TEST_SKIPS

        self.assertEqual({k: tuple(v) for k, v in common_distributed.TEST_SKIPS.items()},
                         {k: tuple(v) for k, v in TEST_SKIPS.items()})
        # the installed release's words: torch 2.15 renamed multi-gpu-N to multi-device-N, "CUDA" to "accelerator"
        key, words = (("multi-device-4", "Need at least 4 accelerator devices") if common_utils.torch_release() >= (2, 15)
                      else ("multi-gpu-4", "Need at least 4 CUDA devices"))
        self.assertEqual(common_distributed.TEST_SKIPS[key].message, words)

    def test_skips_on_this_machine(self):
        class T(unittest.TestCase):
            @common_utils.skipIfRocm
            def test_a(self):
                pass

            @common_utils.skipIfRocm(msg="flaky there")
            def test_b(self):
                pass

            @common_utils.skipIfHpu
            def test_c(self):
                pass

        result = unittest.TestResult()
        unittest.defaultTestLoader.loadTestsFromTestCase(T).run(result)
        self.assertEqual((result.testsRun, len(result.skipped)),
                         (3, 3 * 0 + int(common_utils.TEST_WITH_ROCM) * 2 + int(common_utils.TEST_HPU)))

        @common_utils.skipIfRocm
        class Whole(unittest.TestCase):
            def test_x(self):
                pass
        self.assertIsInstance(Whole, type)  # a skipped class stays a class (unittest's skip; upstream's lazy one too)

    def test_helpers_of_common_distributed(self):
        from torch.testing._internal import common_distributed as up

        self.assertEqual(common_distributed.at_least_x_gpu(1), up.at_least_x_gpu(1))
        self.assertEqual(common_distributed.tp_transports(), up.tp_transports())
        with common_distributed.captured_output() as (out, err):
            print("to out")
        self.assertEqual(out.getvalue(), "to out\n")

    def test_tcp_store_and_connect_words(self):
        from torch.testing._internal import common_utils as up

        store = common_distributed.create_tcp_store()
        store.set("k", "v")
        self.assertEqual(store.get("k"), b"v")
        self.assertIsInstance(store, dist.TCPStore)
        self.assertEqual((common_utils.ADDRESS_IN_USE, common_utils.CONNECT_TIMEOUT),
                         (up.ADDRESS_IN_USE, up.CONNECT_TIMEOUT))
        taken = dist.TCPStore("localhost", 0, 1, True, wait_for_workers=False)
        with self.assertRaises((RuntimeError, dist.DistNetworkError)) as caught:
            dist.TCPStore("localhost", taken.port, 1, True, wait_for_workers=False)
        # torch's own words differ in case from upstream's constant on some releases (2.13's libuv store says
        # "address already in use"): create_tcp_store matches them either way
        self.assertIn(common_utils.ADDRESS_IN_USE.lower(), str(caught.exception).lower())

    def test_gpu_helpers(self):
        from torch.testing._internal import common_distributed as up

        for world_size in (1, 2, 4):
            self.assertEqual(common_distributed.init_multigpu_helper(world_size, "gloo"),
                             up.init_multigpu_helper(world_size, "gloo"))
        import os

        seen = {}

        @common_distributed.with_nccl_blocking_wait
        def body():
            seen.update(os.environ)

        before = (os.environ.get("TORCH_NCCL_BLOCKING_WAIT"), os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING"))
        os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "3"
        try:
            body()
            self.assertEqual(seen.get("TORCH_NCCL_BLOCKING_WAIT"), "1")
            self.assertNotIn("TORCH_NCCL_ASYNC_ERROR_HANDLING", seen)
            self.assertEqual(os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING"), "3")
            self.assertEqual(os.environ.get("TORCH_NCCL_BLOCKING_WAIT"), before[0])
        finally:
            os.environ.pop("TORCH_NCCL_ASYNC_ERROR_HANDLING", None)
            if before[1] is not None:
                os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = before[1]

        class T(unittest.TestCase):
            world_size = 2

            @common_distributed.skip_if_no_gpu
            def test_x(self):
                pass

        result = unittest.TestResult()
        T("test_x").run(result)
        if not torch.cuda.is_available():
            self.assertEqual([why for _, why in result.skipped], ["CUDA is not available."])

    def test_load_tests_keeps_the_modules_tests(self):
        class T(unittest.TestCase):
            def test_a(self):
                pass

            def test_b(self):
                pass

        loader = unittest.TestLoader()
        tests = unittest.TestSuite([loader.loadTestsFromTestCase(T), unittest.TestSuite()])
        suite = common_utils.load_tests(loader, tests, None)
        self.assertEqual(sorted(t.id().rsplit(".", 1)[1] for group in suite for t in group), ["test_a", "test_b"])
        self.assertEqual(len(list(suite)), 1)  # the empty group left out, as upstream's

    def test_cycles_per_ms_on_cpu(self):
        value = common_utils.get_cycles_per_ms("cpu")
        self.assertIsInstance(value, float)
        self.assertGreater(value, 0)
        self.assertIs(common_utils.get_cycles_per_ms("cpu"), value)  # measured once


class TestNamesRealFilesImport(unittest.TestCase):
    """The flags, skips, models and helpers PyTorch's own distributed tests import (docs/upstream-names.txt), each
    against the installed release's own: the same value on this machine, the same verdict, the same output."""

    def _same_flags(self, up, mine, names):
        for name in names:
            with self.subTest(name):
                self.assertEqual(bool(getattr(mine, name)), bool(getattr(up, name)))

    def test_machine_flags(self):
        from torch.testing._internal import common_cuda as up_cuda, common_utils as up_utils
        from torch.testing._internal.distributed._tensor import common_dtensor as up_dt

        self._same_flags(up_utils, common_utils, ["IS_CI", "IS_JETSON", "TEST_ACCELERATOR", "TEST_MULTIACCELERATOR",
                                                  "TEST_CUDA_GRAPH"]
                         + (["TEST_CUDA_PYTHON_BINDINGS"] if hasattr(up_utils, "TEST_CUDA_PYTHON_BINDINGS") else []))
        self._same_flags(up_cuda, common_cuda, [n for n in common_cuda.__all__ if hasattr(up_cuda, n) and (
            n.endswith("OrLater") or n.startswith("PLATFORM_SUPPORTS_"))])  # CUDA11OrLater: an older release's
        from torch.testing._internal import common_distributed as up_dist
        self._same_flags(up_dist, common_distributed, ["PLATFORM_SUPPORTS_SYMM_MEM"])
        for name in ("MI350_ARCH", "MI300_ARCH", "MI200_ARCH"):
            self.assertEqual(getattr(common_utils, name), getattr(up_utils, name))
        self.assertEqual(common_utils.getRocmVersion(), up_utils.getRocmVersion())
        self.assertEqual(common_cuda._get_torch_rocm_version(), up_cuda._get_torch_rocm_version())
        self.assertEqual(common_cuda._get_torch_cuda_version(), up_cuda._get_torch_cuda_version())
        for name in ("DEVICE_TYPE", "PG_BACKEND", "NUM_DEVICES"):
            self.assertEqual(getattr(common_dtensor, name), getattr(up_dt, name), name)
        from torch.testing._internal import common_device_type as up_cdt
        for name in ("e4m3_type", "e5m2_type", "E4M3_MAX_POS", "E5M2_MAX_POS"):
            self.assertEqual(getattr(common_device_type, name), getattr(up_cdt, name), name)

    def test_names_of_newer_releases_and_reexports(self):
        from torch.testing._internal import common_distributed as up_dist, common_utils as up_utils
        from torch.testing._internal.distributed._tensor import common_dtensor as up_dt

        self.assertEqual(common_utils.FILE_SCHEMA, up_utils.FILE_SCHEMA)
        for name in ("FILE_SCHEMA", "find_free_port", "IS_SANDCASTLE", "LazyVal", "retry_on_connect_failures",
                     "skip_but_pass_in_sandcastle", "skip_but_pass_in_sandcastle_if", "TEST_CUDA", "TEST_HPU",
                     "TEST_WITH_TSAN", "TEST_XPU", "TestCase"):
            with self.subTest(name):  # upstream's common_distributed hands on common_utils's own objects; so do we
                self.assertIs(getattr(up_dist, name), getattr(up_utils, name))
                self.assertIs(getattr(common_distributed, name), getattr(common_utils, name))
        if hasattr(up_utils, "HardwareClassification"):  # torch 2.15 on
            self.assertEqual([(m.name, m.value) for m in common_utils.HardwareClassification],
                             [(m.name, m.value) for m in up_utils.HardwareClassification])
        if hasattr(up_dt, "_get_device_type"):  # torch 2.15 on
            for world_size in (1, 2, 4096):
                self.assertEqual(common_dtensor._get_device_type(world_size), up_dt._get_device_type(world_size))

    def test_names_of_older_releases(self):
        """Names the installed upstream no longer has, with the meaning the releases that had them gave them."""
        self.assertIs(common_distributed.skip_if_rocm, common_distributed.skip_if_rocm_multiprocess)
        cuda = torch.version.cuda
        self.assertIs(common_cuda.CUDA11OrLater, cuda is not None and int(cuda.split(".")[0]) >= 11)
        model = torch.nn.Linear(2, 2)
        self.assertIs(common_fsdp._maybe_cuda(model, False), model)
        if not torch.cuda.is_available():  # it asks for CUDA by name, as it did
            with self.assertRaises((AssertionError, RuntimeError)):
                common_fsdp._maybe_cuda(model, True)
        self.assertIs(getattr(common_fsdp.test_compiled_fsdp, "__test__", True), False)  # not collected as a test

    def test_older_ci_flags_read_their_variables_as_upstream_did(self):
        import os
        import subprocess
        import sys

        env = dict(os.environ, IN_CI="true", IS_PYTORCH_CI="0")  # IN_CI on only as "1"; IS_PYTORCH_CI when non-empty
        code = "from harness.upstream_modules import common_utils as c; print(c.IS_IN_CI, c.IS_PYTORCH_CI)"
        run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(run.stdout.split(), ["False", "True"], run.stderr[-2000:])
        self.assertIs(common_utils.IS_IN_CI, os.environ.get("IN_CI") == "1")
        self.assertIs(common_utils.IS_PYTORCH_CI, bool(os.environ.get("IS_PYTORCH_CI")))

    def test_requires_accelerator_on_a_test_and_a_class(self):
        from torch.testing._internal import common_utils as up

        decorators = [common_utils.requires_accelerator]
        if hasattr(up, "requires_accelerator"):  # torch 2.15 on
            decorators.append(up.requires_accelerator)
        expected = [] if torch.accelerator.is_available() else ["requires accelerator"]
        for decorator in decorators:
            @decorator
            class Whole(unittest.TestCase):
                def test_x(self):
                    pass

            class One(unittest.TestCase):
                @decorator
                def test_x(self):
                    pass
            for cls in (Whole, One):
                with self.subTest(decorator=decorator, cls=cls.__name__):
                    result = unittest.TestResult()
                    unittest.defaultTestLoader.loadTestsFromTestCase(cls).run(result)
                    # (Python 3.12.1's unittest does not count a skipped test in testsRun)
                    ran = max(result.testsRun, len(result.skipped))
                    self.assertEqual(([why for _, why in result.skipped], ran, result.wasSuccessful()),
                                     (expected, 1, True))

    def test_capabilities_as_upstreams(self):
        from torch.testing._internal import common_device_type as up

        cdt = common_device_type
        for kind in ("cpu", "cuda"):  # each device type's answers on this machine, where upstream has them
            base = getattr(cdt, f"{kind.upper()}TestBase")
            mine = cdt._device_capabilities(base)
            self.assertEqual(set(mine), {"dtype.fp8", "dtype.bf16", "attention.flash_attention",
                                         "attention.mem_efficient_attention"})
            if hasattr(up, "Capability"):  # torch 2.15 on
                with self.subTest(kind):
                    self.assertEqual(mine, getattr(up, f"{kind.upper()}TestBase").get_capabilities())
        cases = [cdt.Capability.dtype.bf16, cdt.Capability.attention.mem_efficient_attention, "dtype.fp4"]
        outcomes = {}
        pairs = [("mine", cdt.requires_capabilities, (cdt.CPUTestBase, unittest.TestCase))]
        if hasattr(up, "Capability"):
            self.assertEqual(vars(cdt.Capability.dtype).keys() - {"__module__", "__qualname__", "__doc__"},
                             vars(up.Capability.dtype).keys() - {"__module__", "__qualname__", "__doc__"})
            pairs.append(("theirs", up.requires_capabilities, (up.CPUTestBase,)))
        for who, requires, bases in pairs:
            for cap in cases:
                T = type("TestCapsCPU", bases, {"test_x": requires(cap)(lambda self: None)})
                result = unittest.TestResult()
                T("test_x").run(result)
                outcomes[who, cap] = ([why for _, why in result.skipped],
                                      [err.splitlines()[-1] for _, err in result.errors + result.failures])
        self.assertEqual(outcomes["mine", cases[0]], ([], []))
        self.assertEqual(outcomes["mine", cases[1]][0],
                         ["Device 'cpu' has unsupported capabilities: attention.mem_efficient_attention"])
        self.assertIn("has not declared capabilities: dtype.fp4", outcomes["mine", cases[2]][1][0])
        for cap in cases if len(pairs) > 1 else []:
            self.assertEqual(outcomes["mine", cap][0], outcomes["theirs", cap][0], cap)

    def test_a100_and_h100_follow_the_gpu(self):
        self.assertIs(inductor_utils.HAS_CUDA, inductor_utils.HAS_CUDA_AND_TRITON)  # an older release's name
        if not inductor_utils.HAS_CUDA_AND_TRITON:
            self.assertFalse(inductor_utils.IS_A100 or inductor_utils.IS_H100)  # upstream's answer without them

    def test_inductor_device_skips(self):
        ran = []

        class T(unittest.TestCase):
            device = "cpu"

            @inductor_utils.skipCPUIf(True, "not on cpu")
            def test_skipped(self):
                ran.append("skipped")

            @inductor_utils.skipCPUIf(False, "never")
            def test_false_condition(self):
                ran.append("false")

            @inductor_utils.skipCUDAIf(True, "not on cuda")
            def test_other_device(self):
                ran.append("other")

        class NoDevice(unittest.TestCase):
            @inductor_utils.skipCUDAIf(True, "not on cuda")
            def test_x(self):
                pass

        result = unittest.TestResult()
        unittest.defaultTestLoader.loadTestsFromTestCase(T).run(result)
        self.assertEqual(sorted(ran), ["false", "other"])
        self.assertEqual([why for _, why in result.skipped], ["not on cpu"])
        result = unittest.TestResult()
        NoDevice("test_x").run(result)
        self.assertIn("reads self.device", result.errors[0][1])

    def test_clone_preserve_strides_offset_matches_upstream(self):
        from torch.testing._internal import inductor_utils as up

        base = torch.arange(24.0)
        for x in (base[3:].as_strided((3, 4), (1, 5), 2), base.view(4, 6).t(), base[5:9], 7):
            ours, theirs = inductor_utils.clone_preserve_strides_offset(x), up.clone_preserve_strides_offset(x)
            if not isinstance(x, torch.Tensor):
                self.assertIs(ours, x)
                continue
            self.assertEqual((ours.size(), ours.stride(), ours.storage_offset()),
                             (theirs.size(), theirs.stride(), theirs.storage_offset()))
            self.assertTrue(torch.equal(ours, theirs))
            self.assertTrue(torch.equal(torch.as_strided(ours, (24,), (1,), 0), base))  # the whole storage copied
            self.assertNotEqual(ours.untyped_storage().data_ptr(), x.untyped_storage().data_ptr())

    def test_inductor_device_skip_of_a_class_keeps_the_class(self):
        # upstream's turns the class into a function: its tests vanish, and instantiate_parametrized_tests of it
        # (test_fully_shard_comm's TestFullyShardSymmMem) fails to collect the whole file under a strict port
        from harness import instantiate_parametrized_tests, parametrize

        ran = []

        @inductor_utils.skipCUDAIf(True, "needs sm90")
        class OnCuda(unittest.TestCase):
            device = "cuda"

            @parametrize("n", [1, 2])
            def test_p(self, n):
                ran.append(("cuda", n))

        @inductor_utils.skipCUDAIf(True, "needs sm90")
        class OnCpu(unittest.TestCase):
            device = "cpu"

            def test_x(self):
                ran.append("cpu")

        @inductor_utils.skipCUDAIf(True, "needs sm90")
        class OnTheMachine(unittest.TestCase):  # no device: the machine's accelerator
            def test_x(self):
                ran.append("machine")

        self.assertIsInstance(OnCuda, type)
        instantiate_parametrized_tests(OnCuda)
        result = unittest.TestResult()
        for cls in (OnCuda, OnCpu, OnTheMachine):
            unittest.defaultTestLoader.loadTestsFromTestCase(cls).run(result)
        self.assertEqual(result.errors + result.failures, [])
        on_cuda = torch.cuda.is_available()
        self.assertEqual(ran, ["cpu"] + ([] if on_cuda else ["machine"]))
        self.assertEqual([why for _, why in result.skipped], ["needs sm90"] * (3 if on_cuda else 2))

    def test_instantiating_a_class_a_decorator_replaced_says_so(self):
        import functools

        from harness import instantiate_parametrized_tests
        from harness.errors import UsageError

        class TestX(unittest.TestCase):
            def test_x(self):
                pass

        @functools.wraps(TestX)
        def replaced(*args, **kwargs):
            return TestX(*args, **kwargs)

        with self.assertRaisesRegex(UsageError, r"instantiate_parametrized_tests\(TestX\): a decorator of the class "
                                                r"replaced it with a function"):
            instantiate_parametrized_tests(replaced)

    def test_inductor_flags_follow_the_machine(self):
        from torch.utils._triton import has_triton

        self.assertEqual(inductor_utils.HAS_TRITON, has_triton())
        self.assertEqual(inductor_utils.HAS_CUDA_AND_TRITON, torch.cuda.is_available() and has_triton())
        self.assertEqual(inductor_utils.HAS_GPU, inductor_utils.HAS_GPU_AND_TRITON)
        if not torch.cuda.is_available():
            self.assertFalse(inductor_utils.HAS_GPU or inductor_utils.HAS_MULTIGPU)
            self.assertEqual(inductor_utils.GPU_TYPE, "cuda")  # upstream's answer without a GPU, too
        self.assertIn(inductor_utils.GPU_TYPE, inductor_utils.GPU_TYPES)

    @nightly("imports upstream's inductor_utils (torch._inductor: about 10 s); CI checks the same flags against "
             "torch's own device and triton queries in test_inductor_flags_follow_the_machine")
    def test_inductor_and_triton_names_are_upstreams(self):
        from torch.testing._internal import inductor_utils as up_ind, triton_utils as up_triton

        self._same_flags(up_ind, inductor_utils, ["HAS_TRITON", "HAS_CUDA_AND_TRITON", "HAS_XPU_AND_TRITON", "HAS_GPU",
                                                  "HAS_GPU_AND_TRITON", "HAS_MPS", "HAS_MULTIGPU"])
        self.assertEqual(inductor_utils.GPU_TYPE, up_ind.GPU_TYPE)
        for cond in (True, False):  # the test's self.device decides, as upstream's
            for device in ("cpu", "cuda"):
                outcomes = []
                for skip in (inductor_utils.skipCPUIf, up_ind.skipCPUIf):
                    class T(unittest.TestCase):
                        @skip(cond, "why")
                        def test_x(self):
                            pass
                    T.device = device
                    result = unittest.TestResult()
                    T("test_x").run(result)
                    outcomes.append([why for _, why in result.skipped])
                self.assertEqual(outcomes[0], outcomes[1], (cond, device))
        for name in triton_utils.__all__:
            if not hasattr(up_triton, name):
                continue  # a name of a newer release (requires_xpu_and_triton: torch 2.12 on): nothing to compare
            with self.subTest(name):
                a, b = self._verdicts([getattr(triton_utils, name), getattr(up_triton, name)])
                self.assertEqual(a, b)

    def _verdicts(self, decorate_pairs):
        """Run one test under each (mine, theirs) decorator: the same outcome and reason."""
        outcomes = []
        for decorator in decorate_pairs:
            class T(unittest.TestCase):
                @decorator
                def test_x(self):
                    pass
            result = unittest.TestResult()
            T("test_x").run(result)
            outcomes.append(([why for _, why in result.skipped], len(result.errors + result.failures),
                             len(result.expectedFailures), len(result.unexpectedSuccesses)))
        return outcomes

    def test_skips_give_upstreams_verdicts(self):
        from torch.testing._internal import common_distributed as up_dist, common_utils as up_utils

        pairs = [
            (common_utils.requires_cuda, up_utils.requires_cuda),
            (common_utils.xfailIfTorchDynamo, up_utils.xfailIfTorchDynamo),
            (common_utils.skipIfRocmVersionLessThan((6, 0)), up_utils.skipIfRocmVersionLessThan((6, 0))),
            (common_utils.runOnRocmArch(common_utils.MI300_ARCH), up_utils.runOnRocmArch(up_utils.MI300_ARCH)),
            (common_utils.skipIfWindows, up_utils.skipIfWindows),
            (common_distributed.requires_nccl_version((2, 18), "why"), up_dist.requires_nccl_version((2, 18), "why")),
            (common_distributed.requires_multicast_support(), up_dist.requires_multicast_support()),
            (common_distributed.skip_if_rocm_ver_lessthan_multiprocess((6, 0)),
             up_dist.skip_if_rocm_ver_lessthan_multiprocess((6, 0))),
            (common_distributed.skip_if_rocm_arch_multiprocess(("gfx942",)),
             up_dist.skip_if_rocm_arch_multiprocess(("gfx942",))),
            (common_distributed.requires_mpi(), up_dist.requires_mpi()),
            (common_distributed.requires_ucc(), up_dist.requires_ucc()),
            (common_distributed.nccl_skip_if_lt_x_gpu("gloo", 2), up_dist.nccl_skip_if_lt_x_gpu("gloo", 2)),
            (common_distributed.require_n_gpus_for_nccl_backend(2, "gloo"),
             up_dist.require_n_gpus_for_nccl_backend(2, "gloo")),
        ]
        if hasattr(up_dist, "requires_xccl"):
            pairs.append((common_distributed.requires_xccl(), up_dist.requires_xccl()))
        if hasattr(up_utils, "requires_accelerator"):  # torch 2.15 on
            pairs.append((common_utils.requires_accelerator, up_utils.requires_accelerator))
        if hasattr(up_dist, "skip_if_rocm_ver_atleast_multiprocess"):  # torch 2.15 on
            pairs.append((common_distributed.skip_if_rocm_ver_atleast_multiprocess((6, 0)),
                          up_dist.skip_if_rocm_ver_atleast_multiprocess((6, 0))))
        for mine, theirs in pairs:
            with self.subTest(getattr(theirs, "__qualname__", repr(theirs))):
                a, b = self._verdicts([mine, theirs])
                self.assertEqual(a, b)

    def test_decorators_do_what_upstreams_do(self):
        import warnings

        from torch.testing._internal import common_utils as up

        for decorate in (common_utils.suppress_warnings, up.suppress_warnings):
            @decorate
            def noisy():
                warnings.warn("loud")
                return 1
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                self.assertIsNone(noisy())  # both return nothing
            self.assertEqual(seen, [])
        before = torch.__future__.get_swap_module_params_on_conversion()
        for decorate in (common_utils.wrapSwapTensorsTest, up.wrapSwapTensorsTest):
            seen = []
            decorate(True)(lambda: seen.append(torch.__future__.get_swap_module_params_on_conversion()))()
            decorate(None)(lambda: seen.append(torch.__future__.get_swap_module_params_on_conversion()))()
            self.assertEqual(seen, [True, before])
            self.assertEqual(torch.__future__.get_swap_module_params_on_conversion(), before)

    def test_distributed_helpers(self):
        from torch.testing._internal import common_distributed as up

        for device in ("cpu", "cuda", "xpu", "hpu"):
            self.assertEqual(common_distributed.requires_ddp_rank(device), up.requires_ddp_rank(device))
        self.assertEqual((common_distributed.ACCELERATOR_DIST_BACKENDS, bool(common_distributed.HAS_ACCELERATOR),
                          common_distributed.logger.level),
                         (up.ACCELERATOR_DIST_BACKENDS, bool(up.HAS_ACCELERATOR), up.logger.level))
        self.assertEqual(common_distributed.has_efa(), up.has_efa())
        import resource

        before = resource.getrlimit(resource.RLIMIT_CORE)
        with common_distributed.core_dumps_disabled():
            self.assertEqual(resource.getrlimit(resource.RLIMIT_CORE)[0], 0)
        self.assertEqual(resource.getrlimit(resource.RLIMIT_CORE), before)

        class T(unittest.TestCase):  # the NCCL backend without enough GPUs: the rank skips in upstream's words
            @common_distributed.nccl_skip_if_lt_x_gpu("nccl", 64)
            def test_x(self):
                pass
        result = unittest.TestResult()
        T("test_x").run(result)
        words = "accelerator devices" if common_utils.torch_release() >= (2, 15) else "CUDA devices"
        self.assertEqual([why for _, why in result.skipped], [f"Need at least 64 {words}"])
        self.assertEqual(common_distributed.get_timeout("m.T.test_ddp_uneven_inputs"),
                         up.get_timeout("m.T.test_ddp_uneven_inputs"))
        self.assertEqual(common_distributed.get_timeout("m.T.test_other"), up.get_timeout("m.T.test_other"))
        self.assertEqual(common_distributed.sm_is_or_higher_than(torch.device("cpu"), 9, 0),
                         up.sm_is_or_higher_than(torch.device("cpu"), 9, 0))
        self.assertEqual(type(common_distributed.create_device()), type(up.create_device()))
        for cast in (False, True):
            inputs_mine, inputs_theirs = {}, {}
            torch.manual_seed(0)
            mine = common_distributed.SaveForwardInputsModel(inputs_mine, cast)
            torch.manual_seed(0)
            theirs = up.SaveForwardInputsModel(inputs_theirs, cast)
            _same_module(self, theirs, mine)
            x = torch.randn(2, 100, dtype=torch.float64 if cast else torch.float32)
            torch.testing.assert_close(mine(x), theirs(x), rtol=0, atol=0)
            self.assertEqual([(type(m).__name__, t.dtype) for m, t in inputs_mine.items()],
                             [(type(m).__name__, t.dtype) for m, t in inputs_theirs.items()])

    def test_ddp_error_logged(self):
        from torch.testing._internal import common_distributed as up

        class Logged:  # what DDP's logging data holds after an error (the helper reads only that)
            def __init__(self, data):
                self.data = data

            def _get_ddp_logging_data(self):
                return self.data

        cases = [({"iteration": 1, "has_error": 1, "error": "bad thing here"}, "bad thing"),
                 ({"iteration": 1, "has_error": 1, "error": "bad thing"}, "bad thing\nException raised from f at x.cpp"),
                 ({"iteration": 1, "has_error": 1, "error": "other"}, "bad thing"),
                 ({"iteration": 1, "error": "bad"}, "bad")]
        for data, words in cases:
            verdicts = []
            for helper in (common_distributed.verify_ddp_error_logged, up.verify_ddp_error_logged):
                try:
                    helper(Logged(data), words)
                    verdicts.append("ok")
                except AssertionError:
                    verdicts.append("fails")
            self.assertEqual(verdicts[0], verdicts[1], (data, words))

    def test_torchcomms_flags_and_group(self):
        import importlib.util

        from torch.testing._internal import common_distributed as up

        for name in ("GLOO", "XCCL", "NCCL", "RCCL", "NCCLX", "RCCLX"):
            self.assertEqual(getattr(common_distributed, f"TORCHCOMM_HAS_{name}"),
                             getattr(up, f"TORCHCOMM_HAS_{name}", False))
        if importlib.util.find_spec("torchcomms") is None:
            with self.assertRaisesRegex(RuntimeError, r"setup_torchcomms_pg\('nccl', rank=0\) needs the torchcomms"):
                common_distributed.setup_torchcomms_pg("nccl", 0, 1, torch.device("cpu"), "/nonexistent", "g")

    def test_sparse_reduce_cases(self):
        from torch.testing._internal import common_distributed as up

        for rank, world_size, num_inputs in ((0, 2, 1), (1, 2, 1), (2, 3, 2)):
            mine = common_distributed.simple_sparse_reduce_tests(rank, world_size, num_inputs)
            theirs = up.simple_sparse_reduce_tests(rank, world_size, num_inputs)
            self.assertEqual(len(mine), len(theirs))
            for (ins, outs), (up_ins, up_outs) in zip(mine, theirs):
                for a, b in zip(ins + outs, up_ins + up_outs, strict=True):
                    self.assertEqual(a.shape, b.shape)
                    torch.testing.assert_close(a.to_dense(), b.to_dense(), rtol=0, atol=0)

    def test_transformers_skip(self):
        import importlib.util

        class T(unittest.TestCase):
            @common_distributed.import_transformers_or_skip()
            def test_x(self):
                pass
        result = unittest.TestResult()
        T("test_x").run(result)
        if importlib.util.find_spec("transformers") is None:  # upstream's rank exits with this code's words
            from torch.testing._internal.common_distributed import TEST_SKIPS
            self.assertEqual([why for _, why in result.skipped], [TEST_SKIPS["importerror"].message])
        else:
            self.assertTrue(result.wasSuccessful())

    def test_nonuniform_model(self):
        from torch.testing._internal import common_fsdp as up

        class Group:  # the model reads only the group's rank and size when FSDP does not wrap it
            def rank(self):
                return 0

            def size(self):
                return 2
        torch.manual_seed(0)
        theirs = up.NonUniformReqGradNWM.init(Group(), up.FSDPInitMode.NO_FSDP, up.DEVICEInitMode.DEVICE_NEVER,
                                              deterministic=True)
        mine = common_fsdp.NonUniformReqGradNWM.init(Group(), common_fsdp.FSDPInitMode.NO_FSDP,
                                                     common_fsdp.DEVICEInitMode.DEVICE_NEVER, deterministic=True)
        _same_module(self, theirs, mine)
        self.assertEqual([(n, p.requires_grad) for n, p in mine.named_parameters()],
                         [(n, p.requires_grad) for n, p in theirs.named_parameters()])
        x = torch.randn(4, 8)
        torch.testing.assert_close(mine(x), theirs(x), rtol=0, atol=0)

    def test_sharded_tensor_op_helpers(self):
        from torch.testing._internal.distributed._shard.sharded_tensor import _test_ops_common as up

        for dim in (0, 1):
            self.assertEqual([(s.dim, [str(p) for p in s.placements])
                              for s in st_ops_common.generate_chunk_sharding_specs_for_test(dim)],
                             [(s.dim, [str(p) for p in s.placements]) for s in up.generate_chunk_sharding_specs_for_test(dim)])
        self.assertEqual([[(m.shard_offsets, m.shard_sizes, str(m.placement)) for m in s.shards]
                          for s in st_ops_common.generate_enumerable_sharding_specs_for_test()],
                         [[(m.shard_offsets, m.shard_sizes, str(m.placement)) for m in s.shards]
                          for s in up.generate_enumerable_sharding_specs_for_test()])
        weight = torch.randn(17, 10)
        for spec in up.generate_chunk_sharding_specs_for_test(0):
            for rank in range(4):
                self.assertEqual(st_ops_common.generate_local_weight_sharding_params_for_test(weight, 0, 4, spec, rank),
                                 up.generate_local_weight_sharding_params_for_test(weight, 0, 4, spec, rank))
        linear = torch.nn.Linear(3, 2)
        mine, theirs = (m.clone_module_parameter(linear, "weight") for m in (st_ops_common, up))
        self.assertIsInstance(mine, torch.nn.Parameter)
        self.assertEqual((mine.data_ptr() != linear.weight.data_ptr(), mine.tolist()),
                         (theirs.data_ptr() != linear.weight.data_ptr(), theirs.tolist()))
        for op, inplace in (("+", False), ("*", False), ("-", True), ("/", True), ("torch.add", False)):
            a, b = torch.tensor([6.0, 8.0]), torch.tensor([2.0, 4.0])
            self.assertEqual(st_ops_common.gen_binary_op_func(op, inplace)(a.clone(), b).tolist(),
                             up.gen_binary_op_func(op, inplace)(a.clone(), b).tolist(), op)

    def test_fsdp_models_and_state_dicts(self):
        from torch.testing._internal import common_fsdp as up

        for nest in (False, True):  # outside enable_wrap: no FSDP1 instance is made
            torch.manual_seed(2)
            theirs = up.SkipModel(double_nest=nest)
            torch.manual_seed(2)
            mine = common_fsdp.SkipModel(double_nest=nest)
            _same_module(self, theirs, mine)
            x = torch.randn(3, 10)
            torch.testing.assert_close(mine(x), theirs(x), rtol=0, atol=0)
        model = torch.nn.Linear(2, 2)
        for kwargs in ({}, {"half": True}, {"cpu_offload": True}):
            a = common_fsdp._get_state_dict(copy_of(model), **kwargs)
            b = up._get_state_dict(copy_of(model), **kwargs)
            self.assertEqual({k: (v.dtype, v.device.type) for k, v in a.items()},
                             {k: (v.dtype, v.device.type) for k, v in b.items()})

    def test_leaked_tensors_found(self):
        import gc
        import warnings

        def leak():
            a = [torch.ones(2)]
            a.append(a)  # a cycle holding a tensor
        before = len(gc.garbage)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            with common_utils.check_leaked_tensors() as garbage:
                leak()
        self.assertEqual(len(garbage), 1)
        self.assertIn("1 tensors were found in the garbage", str(seen[-1].message))
        self.assertEqual((gc.get_debug(), len(gc.garbage)), (0, before))  # what it kept to look at, let go

    @nightly("each check collects the whole heap twice (seconds here); CI checks the leak found in "
             "test_leaked_tensors_found")
    def test_leaked_tensors_found_as_upstream(self):
        import gc
        import warnings

        from torch.testing._internal import common_utils as up

        def leak():
            a = [torch.ones(2)]
            a.append(a)  # a cycle holding a tensor
        counts = []
        for check in (common_utils.check_leaked_tensors, up.check_leaked_tensors):
            for body in (leak, lambda: torch.ones(2)):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    with check() as garbage:
                        body()
                counts.append(len(garbage))
                gc.garbage.clear()  # upstream's leaves what it saved there
        self.assertEqual(counts[:2], counts[2:])
        self.assertEqual(counts[:2], [1, 0])
        self.assertEqual(gc.get_debug(), 0)

    def test_cpu_sleep(self):
        from torch.testing._internal import common_utils as up

        before = getattr(torch.cpu, "_sleep", None)
        common_utils.device_sleep("cpu", 1000)
        up.device_sleep("cpu", 1000)
        self.assertIs(getattr(torch.cpu, "_sleep", None), before)

    def test_fsdp_machine_values_and_small_models(self):
        from torch.testing._internal import common_fsdp as up

        self.assertEqual((common_fsdp.DEVICE_TYPE, common_fsdp.DISTRIBUTED_BACKEND, common_fsdp.DEVICE_COUNT),
                         (up.DEVICE_TYPE, up.DISTRIBUTED_BACKEND, up.DEVICE_COUNT))
        inner = torch.nn.Linear(2, 2)
        x = torch.randn(3, 2)
        torch.testing.assert_close(common_fsdp.DummyDDP(inner)(x), up.DummyDDP(inner)(x), rtol=0, atol=0)

        class Group:
            def rank(self):
                return 0

            def size(self):
                return 1
        for cls in (common_fsdp.AlwaysWrapNestedWrappedModule, up.AlwaysWrapNestedWrappedModule):
            torch.manual_seed(0)
            model = cls.init(Group(), up.FSDPInitMode.NO_FSDP if cls is up.AlwaysWrapNestedWrappedModule
                             else common_fsdp.FSDPInitMode.NO_FSDP,
                             up.DEVICEInitMode.DEVICE_NEVER if cls is up.AlwaysWrapNestedWrappedModule
                             else common_fsdp.DEVICEInitMode.DEVICE_NEVER, deterministic=True)
            if cls is up.AlwaysWrapNestedWrappedModule:
                _same_module(self, model, mine)
            else:
                mine = model

    def test_fsdp_delay_and_expert_models(self):
        from torch.testing._internal import common_fsdp as up

        class Group:
            def rank(self):
                return 0

            def size(self):
                return 1
        for m in (common_fsdp, up):
            torch.manual_seed(0)
            models = [m.MixtureOfExperts.init(Group(), m.FSDPInitMode.NO_FSDP, m.DEVICEInitMode.DEVICE_NEVER,
                                              deterministic=True),
                      m.NestedWrappedModuleWithDelay.init(Group(), m.FSDPInitMode.NO_FSDP,
                                                          m.DEVICEInitMode.DEVICE_NEVER, deterministic=True,
                                                          delay_after_loss_ms=1)]
            if m is common_fsdp:
                mine = models
            else:
                theirs = models
        for a, b in zip(mine, theirs):
            _same_module(self, b, a)
        x = torch.randn(4, 8)
        torch.testing.assert_close(mine[0](x), theirs[0](x), rtol=0, atol=0)
        self.assertEqual(mine[0].num_expert_params, theirs[0].num_expert_params)
        self.assertEqual([hasattr(p, "expert") for p in mine[0].parameters()],
                         [hasattr(p, "expert") for p in theirs[0].parameters()])
        inp = mine[1].get_input("cpu")
        torch.testing.assert_close(mine[1].get_loss(inp, mine[1](*inp)), theirs[1].get_loss(inp, theirs[1](*inp)),
                                   rtol=0, atol=0)

    def test_fsdp_helpers(self):
        from torch.testing._internal import common_fsdp as up

        mapping = {"True": "on", "False": "off", "1": "one"}
        for args in ((True, None, 1), (False,), ()):
            self.assertEqual(common_fsdp.subtest_name(mapping, *args), up.subtest_name(mapping, *args))
        for pg in (common_fsdp.DummyProcessGroup(1, 4), up.DummyProcessGroup(1, 4)):
            self.assertEqual((pg.rank(), pg.size(), pg.allreduce(torch.ones(1)).get_future().wait()), (1, 4, 1))

    def test_dtensor_helpers(self):
        from torch.distributed.device_mesh import DeviceMesh
        from torch.testing._internal.distributed._tensor import common_dtensor as up

        torch.manual_seed(0)
        theirs = up.RMSNormPython(6)
        mine = common_dtensor.RMSNormPython(6)
        _same_module(self, theirs, mine)
        x = torch.randn(3, 6)
        torch.testing.assert_close(mine(x), theirs(x), rtol=0, atol=0)
        self.assertEqual(common_dtensor.map_local_tensor_for_rank(x, 2, lambda t, r: t * r).sum(),
                         up.map_local_tensor_for_rank(x, 2, lambda t, r: t * r).sum())

        class Mesh:  # generate_shard_orders reads only the mesh's ndim
            def __init__(self, ndim):
                self.ndim = ndim
        for ndim, rank in ((1, 1), (2, 2), (3, 2), (2, 3)):
            with self.subTest(ndim=ndim, tensor_rank=rank):
                self.assertEqual(list(common_dtensor.generate_shard_orders(Mesh(ndim), rank)),
                                 list(up.generate_shard_orders(Mesh(ndim), rank)))
        self.assertTrue(issubclass(common_dtensor.LocalDTensorOpTestBase, common_dtensor.LocalDTensorTestBase))
        seen = []

        class ctx:  # a context manager that is not callable (contextlib's are: they decorate too)
            def __init__(self, label):
                self.label = label

            def __enter__(self):
                seen.append(f"enter {self.label}")

            def __exit__(self, *exc):
                seen.append(f"exit {self.label}")
        for m in (common_dtensor, up):
            wrapped = m.make_wrapped(lambda self: seen.append(f"body {self}"), [ctx("a"), lambda self: ctx(self)])
            self.assertEqual(wrapped("t"), None)
        self.assertEqual(seen[:5], seen[5:])
        self.assertEqual(seen[:5], ["enter a", "enter t", "body t", "exit t", "exit a"])
        self.assertIsNotNone(DeviceMesh)


class TestDeviceTypes(unittest.TestCase):
    """The same generated classes and test names as upstream's, with parametrize and dtypes, on this machine."""

    @staticmethod
    def _generic(cdt, parametrize):
        class TestFoo(unittest.TestCase):
            def test_plain(self, device):
                self.seen = device

            @parametrize("n", [1, 2])
            def test_param(self, device, n):
                pass

            @cdt.dtypes(torch.float32, torch.int64)
            def test_dtype(self, device, dtype):
                pass

            @cdt.dtypes(torch.float32)
            @parametrize("flag", [True, False])
            def test_both(self, device, dtype, flag):
                pass

            @cdt.onlyCUDA
            def test_cuda_only(self, device):
                pass

            @cdt.onlyCPU
            def test_cpu_only(self):
                pass

            def helper(self):
                return 1

        return TestFoo

    def _names(self, cdt, parametrize, **kwargs):
        generic = self._generic(cdt, parametrize)
        scope = {"TestFoo": generic}
        cdt.instantiate_device_type_tests(generic, scope, **kwargs)
        # the tests unittest collects (upstream's base has a ``test_exclusions`` table, no test)
        return {name: sorted(n for n in dir(cls) if n.startswith("test") and callable(getattr(cls, n)))
                for name, cls in scope.items()}, scope

    def test_same_names_as_upstream(self):
        from torch.testing._internal import common_device_type as up
        from torch.testing._internal.common_utils import parametrize as up_parametrize

        from harness import parametrize

        for kwargs in ({}, {"only_for": "cpu"}, {"except_for": "cpu"}, {"only_for": ("cpu", "cuda")}):
            with self.subTest(kwargs):
                mine, scope = self._names(common_device_type, parametrize, **kwargs)
                theirs, _ = self._names(up, up_parametrize, **kwargs)
                self.assertEqual(mine, theirs)
        mine, _ = self._names(common_device_type, parametrize)
        self.assertIn("test_both_flag_True_cpu_float32", mine["TestFooCPU"])  # dtype after the device, as upstream

    def test_tests_run_with_their_device(self):
        from harness import parametrize

        names, scope = self._names(common_device_type, parametrize)
        cls = scope["TestFooCPU"]
        self.assertEqual(cls.device_type, "cpu")
        self.assertEqual(cls.__module__, self._generic(common_device_type, parametrize).__module__)
        result = unittest.TestResult()
        unittest.defaultTestLoader.loadTestsFromTestCase(cls).run(result)
        self.assertEqual(result.errors + result.failures, [])
        self.assertEqual([t.id().rsplit(".", 1)[1] for t, _ in result.skipped], ["test_cuda_only_cpu"])
        test = cls("test_plain_cpu")
        test.run()
        self.assertEqual(test.seen, "cpu")
        self.assertEqual(test.helper(), 1)

    def test_generic_class_leaves_the_scope(self):
        from harness import parametrize

        generic = self._generic(common_device_type, parametrize)
        scope = {"TestFoo": generic}
        common_device_type.instantiate_device_type_tests(generic, scope)
        self.assertNotIn("TestFoo", scope)
        self.assertFalse([n for n in vars(generic) if n.startswith("test")])
        with self.assertRaisesRegex(KeyError, "not in the scope"):
            common_device_type.instantiate_device_type_tests(generic, {})

    # ---- @ops: one test per OpInfo and dtype --------------------------------------------------------------

    @staticmethod
    def _opinfos():
        """Two real OpInfos (upstream's class; op_db itself is slow to import: the nightly check uses it), one with
        a variant and a decoration that expects test_a to fail on float64."""
        from torch.testing._internal.opinfo.core import DecorateInfo, OpInfo, SampleInput

        def samples(op, device, dtype, requires_grad, **kwargs):
            yield SampleInput(torch.ones(4, 2, device=device, dtype=dtype), args=(torch.ones(2, device=device, dtype=dtype),))

        add = OpInfo("add", op=torch.add, dtypes=(torch.float32, torch.float64, torch.int64), sample_inputs_func=samples,
                     decorators=(DecorateInfo(unittest.expectedFailure, "TestOps", "test_a",
                                              dtypes=(torch.float64,)),))
        mul = OpInfo("mul", variant_test_name="plain", op=torch.mul, dtypes=(torch.float32, torch.bool),
                     backward_dtypes=(torch.float32,), sample_inputs_func=samples)
        return [add, mul]

    def _op_names(self, cdt, parametrize, base, op_list):
        class TestOps(base):
            @cdt.ops(op_list)
            def test_a(self, device, dtype, op):
                for sample in op.sample_inputs(device, dtype):
                    result = op(sample.input, *sample.args)
                    self.assertEqual(result.dtype, dtype)
                    if dtype == torch.float64:
                        self.assertEqual(result.sum().item(), 0)  # expected to fail (the OpInfo's decoration)

            @cdt.ops(op_list, dtypes=cdt.OpDTypes.none)
            def test_b(self, device, op):
                pass

            @cdt.ops(op_list, allowed_dtypes=(torch.float32, torch.int64))
            @parametrize("k", [1, 2])
            def test_c(self, device, dtype, op, k):
                pass

            @cdt.ops(op_list, dtypes=cdt.OpDTypes.any_one)
            def test_d(self, device, dtype, op):
                pass

            @cdt.ops(op_list, dtypes=cdt.OpDTypes.unsupported_backward)
            def test_e(self, device, dtype, op):
                pass

            @cdt.ops(op_list, dtypes=[torch.float16])
            def test_f(self, device, dtype, op):
                pass

        scope = {"TestOps": TestOps}
        cdt.instantiate_device_type_tests(TestOps, scope, only_for="cpu")
        return {name: sorted(n for n in dir(cls) if n.startswith("test_") and callable(getattr(cls, n)))
                for name, cls in scope.items()}, scope

    def test_ops_same_names_as_upstream(self):
        from torch.testing._internal import common_device_type as up
        from torch.testing._internal.common_utils import parametrize as up_parametrize

        from harness import DTensorTestBase, parametrize

        op_list = self._opinfos()
        theirs, _ = self._op_names(up, up_parametrize, unittest.TestCase, op_list)
        for base in (unittest.TestCase, DTensorTestBase):
            with self.subTest(base.__name__):
                mine, _ = self._op_names(common_device_type, parametrize, base, op_list)
                self.assertEqual(mine, theirs)
        self.assertIn("test_a_mul_plain_cpu_bool", mine["TestOpsCPU"])
        self.assertIn("test_c_add_k_1_cpu_int64", mine["TestOpsCPU"])  # the top decorator names first
        self.assertIn("test_b_add_cpu", mine["TestOpsCPU"])
        self.assertEqual([n for n in mine["TestOpsCPU"] if n.startswith("test_d")],
                         ["test_d_add_cpu_float32", "test_d_mul_plain_cpu_float32"])

    def test_ops_tests_run_with_the_op_and_its_decorations(self):
        from harness import parametrize

        _, scope = self._op_names(common_device_type, parametrize, unittest.TestCase, self._opinfos())
        result = unittest.TestResult()
        suite = unittest.TestSuite(unittest.defaultTestLoader.loadTestsFromNames(
            ["test_a_add_cpu_float32", "test_a_add_cpu_float64", "test_a_mul_plain_cpu_bool"], scope["TestOpsCPU"]))
        suite.run(result)
        self.assertEqual(result.errors + result.failures, [])
        self.assertEqual(result.testsRun, 3)
        self.assertEqual([t.id().rsplit(".", 1)[1] for t, _ in result.expectedFailures], ["test_a_add_cpu_float64"])

    def test_tolerance_overrides_as_upstream(self):
        from torch.testing._internal import common_device_type as up
        from torch.testing._internal.common_utils import TestCase as UpTestCase
        from torch.testing._internal.opinfo.core import DecorateInfo, OpInfo

        from harness import TestCase

        seen = {}
        for cdt, base in ((up, UpTestCase), (common_device_type, TestCase)):
            op = OpInfo("neg", op=torch.neg, dtypes=(torch.float32, torch.float64), decorators=(
                DecorateInfo(cdt.toleranceOverride({torch.float32: cdt.tol(atol=1e-3, rtol=1e-4)}), "TestTol",
                             "test_op"),))
            records = seen.setdefault(cdt.__name__.split(".")[0], {})

            class TestTol(base):
                @cdt.toleranceOverride({torch.float16: cdt.tol(atol=1e-2, rtol=1e-3)})
                @cdt.precisionOverride({torch.float64: 1e-7, torch.float16: 5.0})
                @cdt.dtypes(torch.float16, torch.float32, torch.float64)
                def test_x(self, device, dtype):
                    records[self.id().rsplit(".", 1)[1]] = (self.precision, self.rel_tol)

                @cdt.ops([op])
                def test_op(self, device, dtype, op):
                    records[self.id().rsplit(".", 1)[1]] = (self.precision, self.rel_tol)

            scope = {"TestTol": TestTol}
            cdt.instantiate_device_type_tests(TestTol, scope, only_for="cpu")
            result = unittest.TestResult()
            unittest.defaultTestLoader.loadTestsFromTestCase(scope["TestTolCPU"]).run(result)
            self.assertEqual(result.errors + result.failures, [])
        self.assertEqual(seen["harness"], seen["torch"])
        self.assertEqual(seen["harness"]["test_x_cpu_float16"], (1e-2, 1e-3))
        self.assertEqual(seen["harness"]["test_op_neg_cpu_float32"], (1e-3, 1e-4))

    def test_op_overrides_as_upstream(self):
        from torch.testing._internal import common_device_type as up

        if not hasattr(up.CPUTestBase, "set_test_configs"):
            self.skipTest(f"torch {torch.__version__} has no backend test configurations (skipOps, "
                          "set_test_configs: torch 2.13 on) to compare with")
        from torch.testing._internal.opinfo.core import DecorateInfo

        from harness import TestCase

        outcomes = []
        for cdt, base in ((up, up.DeviceTypeTestBase.__mro__[1]), (common_device_type, TestCase)):
            op_list = self._opinfos()
            overrides = {"mul.plain": [DecorateInfo(unittest.expectedFailure, "TestOps", "test_a",
                                                    dtypes=(torch.float32,))]}

            class TestOps(base):
                @up.skipOps([up.skip("add", dtypes=(torch.int64,))])
                @cdt.ops(op_list, allowed_dtypes=(torch.float32, torch.int64))
                def test_a(self, device, dtype, op):
                    self.assertNotEqual((op.name, dtype), ("mul", torch.float32))

                def test_b(self, device):
                    pass

            class TestGone(base):
                def test_c(self, device):
                    pass

            # the table as the installed release reads it (a list to torch 2.14; "*" and dtype rules from 2.15)
            exclusions = {"TestOps": ["test_b"], "TestGone": ["*"]}
            if common_utils.torch_release() >= (2, 15):
                exclusions = {"TestOps": {"test_b": "*", "test_d": {"dtypes": [torch.float64]}}, "TestGone": "*"}

            @cdt.dtypes(torch.float32, torch.float64)
            def test_d(self, device, dtype):
                pass
            TestOps.test_d = test_d

            # a device type's own configuration (a backend's), put back after
            cdt.CPUTestBase.set_test_configs(op_overrides=overrides, op_allowlist=("add", "mul.plain"),
                                             test_exclusions=exclusions)
            try:
                scope = {"TestOps": TestOps, "TestGone": TestGone}
                cdt.instantiate_device_type_tests(TestOps, scope, only_for="cpu")
                cdt.instantiate_device_type_tests(TestGone, scope, only_for="cpu")
            finally:
                cdt.CPUTestBase.set_test_configs()
            result = unittest.TestResult()
            unittest.defaultTestLoader.loadTestsFromTestCase(scope["TestOpsCPU"]).run(result)
            name = lambda t: t.id().rsplit(".", 1)[1]  # noqa: E731
            outcomes.append((sorted(scope), result.testsRun, len(result.errors + result.failures),
                             sorted(name(t) for t, _ in result.skipped),
                             sorted(name(t) for t, _ in result.expectedFailures)))
        self.assertEqual(outcomes[0], outcomes[1])
        dtype_rules = common_utils.torch_release() >= (2, 15)
        self.assertEqual(outcomes[1], (["TestOpsCPU"], 4 if dtype_rules else 5, 0, ["test_a_add_cpu_int64"],
                                       ["test_a_mul_plain_cpu_float32"]))

    def test_ops_usage_errors(self):
        from harness import instantiate_parametrized_tests

        with self.assertRaisesRegex(TypeError, "OpDTypes or a list of torch dtypes"):
            common_device_type.ops([], dtypes=["float32"])

        class Plain(unittest.TestCase):
            @common_device_type.ops(self._opinfos())
            def test_a(self, dtype, op):
                pass
        with self.assertRaisesRegex(RuntimeError, "instantiate_device_type_tests"):
            instantiate_parametrized_tests(Plain)

    @nightly("imports upstream's op_db (seconds); CI compares the names on two OpInfos made with upstream's OpInfo "
             "class in test_ops_same_names_as_upstream")
    def test_ops_on_op_db_same_names_as_upstream(self):
        from torch.testing._internal import common_device_type as up
        from torch.testing._internal.common_methods_invocations import op_db
        from torch.testing._internal.common_utils import parametrize as up_parametrize

        from harness import DTensorTestBase, parametrize

        op_list = [op for op in op_db if op.name in ("add", "nn.functional.relu", "split")]
        self.assertEqual(len(op_list), 4)  # split has a variant: split_list_args
        theirs, _ = self._op_names(up, up_parametrize, unittest.TestCase, op_list)
        for base in (unittest.TestCase, DTensorTestBase):
            with self.subTest(base.__name__):
                mine, _ = self._op_names(common_device_type, parametrize, base, op_list)
                self.assertEqual(mine, theirs)
        self.assertIn("test_a_nn_functional_relu_cpu_bfloat16", mine["TestOpsCPU"])


class TestFakeComms(unittest.TestCase):
    def test_with_dist(self):
        with distributed_utils.with_dist(rank=1, world_size=4):
            self.assertEqual((dist.get_rank(), dist.get_world_size()), (1, 4))
            t = torch.ones(2)
            dist.all_reduce(t)  # the fake group returns at once
        self.assertFalse(dist.is_initialized())

    def test_with_fake_comms(self):
        seen = []

        class T(unittest.TestCase):
            @distributed_utils.with_fake_comms
            def test_default(self):
                seen.append(dist.get_world_size())

            @distributed_utils.with_fake_comms(rank=2, world_size=8)
            def test_given(self):
                seen.append((dist.get_rank(), dist.get_world_size()))

        result = unittest.TestResult()
        unittest.defaultTestLoader.loadTestsFromTestCase(T).run(result)
        self.assertTrue(result.wasSuccessful(), result.errors)
        self.assertEqual(sorted(map(str, seen)), ["(2, 8)", "2"])
        self.assertFalse(dist.is_initialized())

    def test_dynamo_per_rank_init_fake(self):
        with common_distributed._dynamo_dist_per_rank_init(3, 4, fake_pg=True):
            self.assertEqual((dist.get_rank(), dist.get_world_size()), (3, 4))
        self.assertFalse(dist.is_initialized())


class _OneRank(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if dist.is_initialized():
            raise unittest.SkipTest("a process group is up in this process already")
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)

    @classmethod
    def tearDownClass(cls):
        if dist.is_initialized():
            dist.destroy_process_group()


class TestFSDP2Patches(InFakeGroup):
    """The patches see the collectives upstream's see, and put back what they replaced: rank 0 of a world of 2 in
    torch's fake group (FSDP2 on one rank issues no collective; the fake one returns each at once)."""

    def _step(self, patch, replacement_of):
        from torch.distributed.fsdp import fully_shard

        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8))
        for layer in (model[0], model[2]):
            fully_shard(layer)
        fully_shard(model)
        calls = []

        def counting(orig):
            def call(*args, **kwargs):
                calls.append(args[0].dtype if args else kwargs["output"].dtype)
                return orig(*args, **kwargs)
            return call

        with patch(counting(replacement_of())):
            model(torch.randn(2, 8)).sum().backward()
        return len(calls)

    def test_same_counts_as_upstream(self):
        from torch.testing._internal import common_fsdp as up

        gather = lambda: dist.all_gather_single if hasattr(dist, "all_gather_single") else dist.all_gather_into_tensor
        scatter = lambda: (dist.reduce_scatter_single if hasattr(dist, "reduce_scatter_single")
                           else dist.reduce_scatter_tensor)
        before = (gather(), scatter())
        for name, original in (("patch_all_gather", gather), ("patch_reduce_scatter", scatter)):
            with self.subTest(name):
                mine = self._step(getattr(common_fsdp, name), original)
                theirs = self._step(getattr(up, name), original)
                self.assertEqual(mine, theirs)
                self.assertGreater(mine, 0)
        self.assertEqual((gather(), scatter()), before)  # put back

    def test_reduce_scatter_with_assert(self):
        seen = []
        rs = functools.partial(common_fsdp.reduce_scatter_with_assert, self, lambda *a, **k: "done",
                               lambda output: seen.append(output.dtype))
        self.assertEqual(rs(torch.zeros(2, dtype=torch.bfloat16), torch.zeros(2)), "done")
        self.assertEqual(rs(output=torch.zeros(1)), "done")
        self.assertEqual(seen, [torch.bfloat16, torch.float32])
        with self.assertRaisesRegex(AssertionError, "Cannot get reduce-scatter output"):
            rs()

    def test_method_patches_put_back(self):
        from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup, RegisterPostBackwardFunction

        before = (FSDPParamGroup.unshard, FSDPParamGroup.reshard, FSDPParamGroup.post_backward,
                  RegisterPostBackwardFunction.backward)
        marker = lambda *a, **k: None  # noqa: E731
        for patch, owner, attr in ((common_fsdp.patch_unshard, FSDPParamGroup, "unshard"),
                                   (common_fsdp.patch_reshard, FSDPParamGroup, "reshard"),
                                   (common_fsdp.patch_post_backward, FSDPParamGroup, "post_backward"),
                                   (common_fsdp.patch_register_post_backward_hook_backward,
                                    RegisterPostBackwardFunction, "backward")):
            with patch(marker):
                self.assertIs(getattr(owner, attr), marker)
        self.assertEqual((FSDPParamGroup.unshard, FSDPParamGroup.reshard, FSDPParamGroup.post_backward,
                          RegisterPostBackwardFunction.backward), before)
        with common_fsdp.patch_all_reduce(marker):
            self.assertIs(dist.all_reduce, marker)
        self.assertIsNot(dist.all_reduce, marker)

    def test_maybe_wrap_fsdp(self):
        from torch.distributed.fsdp import FullyShardedDataParallel

        plain = torch.nn.Linear(2, 2)
        self.assertIs(common_fsdp._maybe_wrap_fsdp(plain, False), plain)
        wrapped = common_fsdp._maybe_wrap_fsdp(torch.nn.Linear(2, 2), True, device_id=torch.device("cpu"))
        self.assertIsInstance(wrapped, FullyShardedDataParallel)


def copy_of(module):
    import copy

    return copy.deepcopy(module)


class TestOnOneRank(_OneRank):
    """The helpers that need a process group, in a one-rank gloo group."""

    def test_broadcast_state_dict(self):
        from torch.testing._internal import common_fsdp as up

        state = {"w": torch.arange(4.0), "b": torch.ones(2)}
        mine = common_fsdp._broadcast_state_dict(0, dict(state))
        theirs = up._broadcast_state_dict(0, dict(state))
        self.assertEqual(list(mine), list(theirs))
        for key in state:
            torch.testing.assert_close(mine[key].cpu(), theirs[key].cpu(), rtol=0, atol=0)

    def test_compiled_fsdp_test_runs_eager_then_compiled_and_puts_back(self):
        from torch.distributed.fsdp import fully_shard
        from torch.utils._triton import has_triton

        seen = []

        def body():  # the module's global fully_shard: the real one, then the compiling one
            seen.append(globals()["fully_shard"] is fully_shard)
        globals()["fully_shard"] = fully_shard
        try:
            import warnings

            for decorate in (common_fsdp.compiled_fsdp_test, common_fsdp.test_compiled_fsdp):  # the older name too
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    decorate()(body)()
                self.assertIs(globals()["fully_shard"], fully_shard)
        finally:
            globals().pop("fully_shard", None)
        self.assertEqual(seen, [True, False] * 2 if has_triton() else [True] * 2)


class TestShardingRuleHelpers(_OneRank):
    """DTensor's sharding-rule helpers give upstream's verdicts, on a one-rank CPU mesh."""

    def test_same_verdicts(self):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Partial, Replicate, Shard
        from torch.testing._internal.distributed._tensor import common_dtensor as up

        mesh = init_device_mesh("cpu", (1,))
        a, b = torch.randn(4, 3), torch.randn(4, 3)
        ints = torch.arange(4)
        cases = [(torch.add, (a, b), {}, [Shard(0), Shard(0)], [Shard(0)]),
                 (torch.mul, (a, b), {}, [Replicate(), Replicate()], [Replicate()]),
                 (torch.sum, (a,), {}, [Shard(0)], [Partial()]),
                 (torch.neg, (ints,), {}, [Replicate()], [Replicate()])]
        for op, args, kwargs, ins, outs in cases:
            with self.subTest(op.__name__):
                self.assertEqual(common_dtensor.validate_sharding_rule_sample(op, args, kwargs, ins, outs, mesh),
                                 up.validate_sharding_rule_sample(op, args, kwargs, ins, outs, mesh))
                if hasattr(up, "validate_sharding_rule_sample_backward"):
                    self.assertEqual(
                        common_dtensor.validate_sharding_rule_sample_backward(op, args, kwargs, ins, mesh),
                        up.validate_sharding_rule_sample_backward(op, args, kwargs, ins, mesh))
        self.assertIsNone(common_dtensor.validate_sharding_rule_sample_backward(torch.neg, (ints,), {},
                                                                                 [Replicate()], mesh))

    def test_op_strategy_context_puts_the_strategy_back(self):
        from torch.distributed.tensor import DTensor

        propagator = DTensor._op_dispatcher.sharding_propagator
        op = torch.ops.aten.add.Tensor
        before = (propagator.op_strategy_funcs.get(op), propagator.op_to_schema_info.get(op))

        def mine(op_schema):
            raise AssertionError("not called here")
        with common_dtensor.op_strategy_context(op, mine):
            self.assertIsNot(propagator.op_strategy_funcs.get(op), before[0])
            self.assertIsNotNone(propagator.op_strategy_funcs.get(op))
        self.assertEqual((propagator.op_strategy_funcs.get(op), propagator.op_to_schema_info.get(op)), before)


class TestExperts(_OneRank):
    """The mixture-of-experts models draw upstream's weights and outputs; sharded by each expert style on a one-rank
    CPU mesh they give the unsharded output, as upstream's styles do."""

    def test_models_and_styles(self):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Shard
        from torch.distributed.tensor.parallel import parallelize_module
        from torch.testing._internal.distributed._tensor import common_dtensor as up

        if not hasattr(up, "ExpertLayer"):
            self.skipTest("this torch's common_dtensor has no expert models (torch 2.13 on)")
        x = torch.randn(2, 3, 8)
        torch.manual_seed(0)
        theirs = up.ExpertLayer(4, 8, 16)
        torch.manual_seed(0)
        mine = common_dtensor.ExpertLayer(4, 8, 16)
        _same_module(self, theirs, mine)
        expected = theirs(x)
        torch.testing.assert_close(mine(x), expected, rtol=0, atol=0)
        mesh = init_device_mesh("cpu", (1,))
        mesh_2d = init_device_mesh("cpu", (1, 1), mesh_dim_names=("ep", "tp"))
        for name, style, target in (
                ("tp", lambda m: m.TensorParallelForExpert(), "experts"),
                ("tp-seq", lambda m: m.TensorParallelForExpert(input_layouts=Shard(0), output_layouts=Shard(0)),
                 "experts"),
                ("ep", lambda m: m.ExpertParallel(), "experts")):
            with self.subTest(name):
                outputs = []
                for m in (common_dtensor, up):
                    model = copy_of(mine)
                    parallelize_module(model, mesh, {target: style(m)})
                    outputs.append(model(x))
                torch.testing.assert_close(outputs[0], outputs[1], rtol=0, atol=0)
                torch.testing.assert_close(outputs[0], expected, rtol=1e-6, atol=1e-6)
        outputs = []
        for m in (common_dtensor, up):
            model = copy_of(mine)
            m.ExpertParallelWithTP(mesh_2d["ep"], mesh_2d["tp"])._apply(model, mesh_2d)
            outputs.append(model(x))
        torch.testing.assert_close(outputs[0], outputs[1], rtol=0, atol=0)


class TestVerifyStateDict(_OneRank):
    """The mixin passes and fails where upstream's does, on the same state dicts. The sharded model lives on a
    CPU mesh: ``fully_shard``'s default mesh is the accelerator's where there is one, and the full state dict it
    is compared with stays on CPU (a GPU machine would compare cuda:0 against cpu)."""

    def _classes(self):
        from torch.testing._internal.distributed.common_state_dict import VerifyStateDictMixin as Theirs

        return [type("Mine", (common_state_dict.VerifyStateDictMixin, unittest.TestCase), {"runTest": lambda s: 0}),
                type("Theirs", (Theirs, unittest.TestCase), {"runTest": lambda s: 0})]

    def test_same_verdicts(self):
        from torch.distributed.checkpoint.state_dict import get_state_dict
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
        optim = torch.optim.Adam(model.parameters())
        model(torch.randn(3, 4)).sum().backward()
        optim.step()
        import copy
        dist_model = copy.deepcopy(model)
        fully_shard(dist_model, mesh=init_device_mesh("cpu", (1,)))
        dist_optim = torch.optim.Adam(dist_model.parameters())
        dist_model(torch.randn(3, 4)).sum().backward()
        msd, osd = model.state_dict(), optim.state_dict()
        dist_msd, dist_osd = get_state_dict(dist_model, optimizers=dist_optim)
        self.assertEqual({v.device.type for v in dist_msd.values()}, {"cpu"})
        wrong = {k: v + 1 for k, v in msd.items()}
        for cls in self._classes():
            with self.subTest(cls.__name__):
                t = cls()
                t._verify_msd(msd, dist_msd)  # the same values, one side DTensors
                with self.assertRaisesRegex(AssertionError, "has mismatched value"):
                    t._verify_msd(wrong, dist_msd)
                with self.assertRaises(AssertionError):
                    t._verify_osd(model, optim, osd, dist_osd)  # dist_optim took no step: no state


class TestLoggingTestCase(unittest.TestCase):
    def test_records_as_upstreams(self):
        from torch.testing._internal.logging_utils import LoggingTestCase as Theirs, make_logging_test as theirs_make

        counts = {}
        for label, base, make in (("mine", logging_utils.LoggingTestCase, logging_utils.make_logging_test),
                                  ("theirs", Theirs, theirs_make)):
            @make(autograd=logging.DEBUG)
            def test_logging(self, records, label=label):
                a = torch.rand(10, requires_grad=True)
                b = a.mul(2).div(3).sum()
                torch.autograd.backward((b, b.clone()))
                counts.setdefault(label, []).append([r.getMessage().split()[0:2] for r in records])
                self.assertTrue(self.hasRecord(records, "SumBackward0"))
                self.getRecord(records, "DivBackward0")

            cls = type(f"T{label}", (base,), {"test_logging": test_logging})
            result = unittest.TestResult()
            unittest.defaultTestLoader.loadTestsFromTestCase(cls).run(result)
            self.assertTrue(result.wasSuccessful(), result.errors + result.failures)
        self.assertEqual(counts["mine"], counts["theirs"])
        self.assertEqual(len(counts["mine"]), 2)  # once through TORCH_LOGS, once through set_logs

    def test_kwargs_to_settings(self):
        from torch.testing._internal.logging_utils import kwargs_to_settings

        kwargs = {"dynamo": logging.DEBUG, "graph": True, "modules": {"torch.distributed": logging.ERROR}}
        self.assertEqual(logging_utils.kwargs_to_settings(**kwargs), kwargs_to_settings(**kwargs))


if __name__ == "__main__":
    unittest.main()


def _converted(converter_cls, mesh, args, kwargs, values, **options):
    """What a DTensorConverter yields, as data: per yield each leaf's type and placements, its local shape, and
    (``values``) the whole tensor's values; then its hit and miss counts and verdict."""
    from torch.utils._pytree import tree_leaves

    def leaf(x):
        if hasattr(x, "placements"):
            return (type(x).__name__, tuple(x.placements), tuple(x.to_local().shape),
                    x.full_tensor().tolist() if values else None)
        if isinstance(x, torch.Tensor):
            return (type(x).__name__, (x.to_dense() if x.is_sparse else x).tolist())
        return x

    converter = converter_cls(mesh, args, kwargs, **options)
    yields = [[leaf(x) for x in tree_leaves(pair)] for pair in converter]
    return yields, converter.hit, converter.miss, converter.successful()


def _converter_samples():
    g = torch.Generator().manual_seed(0)
    return [((torch.randn(4, 8, generator=g), torch.randn(8, generator=g)), {"alpha": 2}),
            ((torch.randn(4, 3, generator=g),), {"other": torch.tensor(2.0),
                                                  "mask": torch.tensor([True, False, True, False])}),
            (([torch.randn(2, 4, generator=g), torch.nn.Parameter(torch.randn(4, 4, generator=g))], 3), {}),
            ((torch.randn(4, 4, generator=g).to_sparse(), torch.randn(4, generator=g)), {})]


class TestDTensorConverterOnFourRanks(InFakeGroup):
    """DTensorConverter yields what upstream's does on a 4-rank mesh (a fake group: the placements and local
    shapes; the values are checked on one real rank below)."""

    FAKE_RANK, FAKE_WORLD = 1, 4

    def test_same_yields_as_upstream(self):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.testing._internal.distributed._tensor import common_dtensor as up

        mesh = init_device_mesh("cpu", (4,))
        counts = []
        for args, kwargs in _converter_samples():
            for options in ({}, {"replicate_only": True}):
                with self.subTest(options=options):
                    mine = _converted(common_dtensor.DTensorConverter, mesh, args, kwargs, False, **options)
                    self.assertEqual(mine, _converted(up.DTensorConverter, mesh, args, kwargs, False, **options))
                    counts.append(len(mine[0]))
        # (4, 8) x (8,): 3 x 2 choices; a scalar and a bool tensor only replicated; (2, 4) x (4, 4): 2 x 3; a
        # sparse tensor's choices are made too, and it is missed
        self.assertEqual(counts, [6, 1, 2, 1, 6, 1, 6, 1])


class TestDTensorConverterValues(_OneRank):
    def test_same_values_as_upstream(self):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.testing._internal.distributed._tensor import common_dtensor as up

        mesh = init_device_mesh("cpu", (1,))
        for args, kwargs in _converter_samples():
            mine = _converted(common_dtensor.DTensorConverter, mesh, args, kwargs, True)
            self.assertEqual(mine, _converted(up.DTensorConverter, mesh, args, kwargs, True))
        with self.assertRaisesRegex(RuntimeError, "Trying to convert to DTensor"):
            common_dtensor.DTensorConverter(mesh, (), {}).to_dist_tensor(object(), mesh, [])


class TestDistributedTables(unittest.TestCase):
    """DistTestCases, DistributedTest's folders and C10dTorchCommsTestBase's choices, against upstream's."""

    def test_dist_test_cases_is_the_installed_releases(self):
        from torch.testing._internal import common_distributed as up

        self.assertEqual(common_distributed.DistTestCases.skip_collective, up.DistTestCases.skip_collective)
        self.assertEqual(common_distributed.DistTestCases.backend_feature, up.DistTestCases.backend_feature)

    def test_temp_directories_as_upstream(self):
        import os

        from torch.testing._internal import common_distributed as up

        saved = {k: os.environ.get(k) for k in ("TEMP_DIR", "INIT_METHOD")}
        layouts = []
        try:
            for module in (up, common_distributed):
                module.initialize_temp_directories()
                root = os.environ["TEMP_DIR"]
                layouts.append((sorted(os.listdir(root)), os.environ["INIT_METHOD"].replace(root, "<root>")))
                module.initialize_temp_directories("tcp://localhost:1")
                layouts.append(os.environ["INIT_METHOD"])
                module.cleanup_temp_dir()
                self.assertFalse(os.path.exists(os.environ["TEMP_DIR"]))
        finally:
            for key, value in saved.items():
                os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
        self.assertEqual(layouts[:2], layouts[2:])

    def test_torchcomms_base_picks_upstreams_backend_and_skip(self):
        from torch.testing._internal import common_distributed as up

        if not hasattr(up, "C10dTorchCommsTestBase"):
            self.skipTest(f"torch {torch.__version__} has no C10dTorchCommsTestBase (torch 2.13 on) to compare with")

        for device in ("cpu", "cuda:1", "xpu", "hpu"):
            self.assertEqual(common_distributed.C10dTorchCommsTestBase.backend(device),
                             up.C10dTorchCommsTestBase.backend(device))
        messages = []
        for module in (up, common_distributed):
            class T(module.C10dTorchCommsTestBase):
                device_type = "cpu"

            self.assertEqual(T.backend_str(), "gloo")
            with self.assertRaises(unittest.SkipTest) as caught:  # without torchcomms: no backend is there
                T.__new__(T)._skip_if_backend_unavailable("cuda:0")
            messages.append(str(caught.exception))
        self.assertEqual(messages[0], messages[1])


class TestCheckpointExtras(unittest.TestCase):
    """checkpoint_utils' example extension writes upstream's bytes (a checkpoint either one saves, the other
    loads), and with_checkpoint_logging sets and restores the level as upstream's."""

    def test_extension_round_trip_with_upstreams(self):
        import tempfile

        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
        from torch.testing._internal.distributed import checkpoint_utils as up

        from harness.upstream_modules import checkpoint_utils as mine

        for writer_side, reader_side in ((mine, up), (up, mine)):
            with tempfile.TemporaryDirectory() as path:
                state = {"w": torch.arange(6.0).reshape(2, 3), "step": torch.tensor(7)}
                dcp.save(state, storage_writer=FileSystemWriter(path, _extensions=[writer_side.Rot13Example()]),
                         no_dist=True)
                loaded = {"w": torch.zeros(2, 3), "step": torch.tensor(0)}
                dcp.load(loaded, storage_reader=FileSystemReader(
                    path, _extension_registry=reader_side.get_test_extension_registry()), no_dist=True)
                self.assertEqual(loaded["w"].tolist(), state["w"].tolist())
                self.assertEqual(loaded["step"].item(), 7)
        data = b"Hello, DCP 123 zZ\x00\xff"
        outs = []
        for side in (mine, up):
            import io

            sink = io.BytesIO()
            writer = side.Rot13Example().transform_to(sink)
            writer.write(data)
            writer.flush()
            back = bytearray(len(data))
            side.Rot13Example().transform_from(io.BytesIO(sink.getvalue())).readinto(back)
            outs.append((sink.getvalue(), bytes(back)))
        self.assertEqual(outs[0], outs[1])
        self.assertEqual(outs[0][1], data)
        self.assertEqual(mine.Rot13Example().get_descriptor(), up.Rot13Example().get_descriptor())

    def test_with_checkpoint_logging(self):
        from torch.testing._internal.distributed import checkpoint_utils as up

        from harness.upstream_modules import checkpoint_utils as mine

        target = logging.getLogger("harness.test.checkpoint")
        seen = []
        for side in (up, mine):
            target.setLevel(logging.WARNING)

            class T(unittest.TestCase):
                @functools.partial(side.with_checkpoint_logging, logger_name="harness.test.checkpoint",
                                   level=logging.DEBUG)
                def test_x(self):
                    seen.append(target.level)
                    raise ValueError("boom")
            result = unittest.TestResult()
            T("test_x").run(result)
            seen.append((target.level, len(result.errors)))
        self.assertEqual(seen[:2], seen[2:])
        self.assertEqual(seen[:2], [logging.DEBUG, (logging.WARNING, 1)])


@nightly("imports upstream's op_db on each of 2 ranks (about 10 s); CI checks @ops' names and runs its tests in "
         "TestDeviceTypes, and DTensorConverter's yields and values against upstream's in TestDTensorConverter*")
class TestOpInfoSuiteOnRanks(unittest.TestCase):
    """An OpInfo DTensor suite as PyTorch writes it (tests/fixtures/fx_opinfo.py) runs on real ranks under the
    harness: @ops' tests with upstream's names, DTensorConverter's DTensors giving the plain tensors' results."""

    def test_runs_and_passes(self):
        r = run_fixture(["tests/fixtures/fx_opinfo.py"], base_env(), runner="harness")
        self.assertEqual(r.returncode, 0, r.describe())
        for name in ("test_op_add_cpu_float32", "test_op_mul_cpu_float32", "test_named_add_cpu", "test_named_mul_cpu"):
            self.assertIn(name, r.output, r.describe())
        self.assertIn("4 passed, 0 failed, 0 skipped", r.output, r.describe())
        self.assertEqual(r.leftover_processes, {})
