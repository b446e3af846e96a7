"""harness.models against upstream's installed models: the same state_dict keys and shapes, the same output
for the same state_dict and input."""
import unittest

import torch

import harness.models as ours


def _upstream():
    from torch.testing._internal import common_fsdp
    from torch.testing._internal.distributed._tensor import common_dtensor

    return common_fsdp, common_dtensor


CASES = {
    "MLP with buffer": ("fsdp", lambda m: m.MLP(8, torch.device("cpu"), with_buffer=True), lambda: torch.randn(3, 8)),
    "MLP no bias x3": ("fsdp", lambda m: m.MLP(8, bias=False, dim_multiplier=3), lambda: torch.randn(3, 8)),
    "MLPStack": ("fsdp", lambda m: m.MLPStack(8, with_seq_parallel=True), lambda: torch.randn(3, 8)),
    "DoubleLinear": ("fsdp", lambda m: m.DoubleLinear(8), lambda: torch.randn(3, 8)),
    "MLPModule": ("dt", lambda m: m.MLPModule("cpu"), lambda: torch.randn(3, 10)),
    "MLPStacked": ("dt", lambda m: m.MLPStacked("cpu", n_layers=3), lambda: torch.randn(3, 10)),
    "Transformer": ("dt", lambda m: m.Transformer(m.ModelArgs(dropout_p=0.0)), lambda: torch.randint(0, 8, (2, 16))),
    "Transformer untied": ("dt", lambda m: m.Transformer(m.ModelArgs(dropout_p=0.0, weight_tying=False, n_layers=3,
                                                                     dim=32, n_heads=8)),
                           lambda: torch.randint(0, 8, (2, 16))),
    "Transformer checkpointed": ("dt", lambda m: m.Transformer(m.ModelArgs(dropout_p=0.0, checkpoint_activations=True,
                                                                           use_attn_mask=False)),
                                 lambda: torch.randint(0, 8, (2, 12))),
    "TransformerBlock": ("dt", lambda m: m.TransformerBlock(m.ModelArgs(dropout_p=0.0)), lambda: torch.randn(2, 5, 16)),
    "Attention": ("dt", lambda m: m.Attention(m.ModelArgs(dropout_p=0.0)), lambda: torch.randn(2, 5, 16)),
    "FeedForward": ("dt", lambda m: m.FeedForward(16, 64, 0.0), lambda: torch.randn(2, 5, 16)),
}


#: harness.models.ModelArgs's fields that an older upstream lacks, with the default that keeps its model upstream's
NEUTRAL_MODEL_ARGS = {"num_experts": 0}


class TestSameAsUpstream(unittest.TestCase):
    def test_each_model(self):
        fsdp, dtensor = _upstream()
        for label, (where, make, data) in CASES.items():
            with self.subTest(label):
                theirs = make(fsdp if where == "fsdp" else dtensor)
                mine = make(ours)
                state = theirs.state_dict()
                self.assertEqual(list(state), list(mine.state_dict()))
                self.assertEqual({k: v.shape for k, v in state.items()},
                                 {k: v.shape for k, v in mine.state_dict().items()})
                self.assertEqual([n for n, _ in theirs.named_parameters()], [n for n, _ in mine.named_parameters()])
                mine.load_state_dict(state)
                x = data()
                a, b = theirs(x), mine(x)
                a, b = (a if isinstance(a, tuple) else (a,)), (b if isinstance(b, tuple) else (b,))
                for p, q in zip(a, b):
                    torch.testing.assert_close(q, p, rtol=0, atol=0)

    def test_mlp_module_draws_upstreams_weights(self):
        _, dtensor = _upstream()
        for (k, p), (k2, q) in zip(dtensor.MLPModule("cpu").state_dict().items(), ours.MLPModule("cpu").state_dict().items()):
            self.assertEqual(k, k2)
            torch.testing.assert_close(q, p, rtol=0, atol=0)

    def test_model_args_defaults(self):
        import dataclasses

        _, dtensor = _upstream()
        theirs, mine = dataclasses.asdict(dtensor.ModelArgs()), dataclasses.asdict(ours.ModelArgs())
        # the installed upstream's fields, with its defaults (an older torch lacks fields a newer one added) ...
        self.assertEqual({k: mine.get(k, "<missing in harness.models>") for k in theirs}, theirs)
        # ... and a field of ours that this upstream lacks defaults to the value that leaves the model as upstream's
        self.assertEqual({k: v for k, v in mine.items() if k not in theirs},
                         {k: v for k, v in NEUTRAL_MODEL_ARGS.items() if k not in theirs})

    def test_experts_are_refused_by_name(self):
        with self.assertRaisesRegex(NotImplementedError, "num_experts=2"):
            ours.TransformerBlock(ours.ModelArgs(num_experts=2))


class TestFSDP1ModelsSameAsUpstream(unittest.TestCase):
    """NestedWrappedModule and TransformerWithSharedParams: built on a real one-rank gloo group (their constructors
    read its rank and size), plain and wrapped in FSDP1 on CPU."""

    @classmethod
    def setUpClass(cls):
        import torch.distributed as dist

        if dist.is_initialized():
            raise unittest.SkipTest("this process already has a default group")
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        cls.group = dist.group.WORLD

    @classmethod
    def tearDownClass(cls):
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()

    def _pair(self, name, fsdp_mode, **kwargs):
        fsdp, _ = _upstream()
        theirs = getattr(fsdp, name).init(self.group, getattr(fsdp.FSDPInitMode, fsdp_mode),
                                          fsdp.DEVICEInitMode.DEVICE_NEVER, **kwargs)
        mine = getattr(ours, name).init(self.group, getattr(ours.FSDPInitMode, fsdp_mode),
                                        ours.DEVICEInitMode.DEVICE_NEVER, **kwargs)
        return theirs, mine

    def test_same_parameters_buffers_and_output(self):
        import warnings

        for name in ("NestedWrappedModule", "TransformerWithSharedParams"):
            for mode, kwargs in (("NO_FSDP", {}), ("RECURSIVE", {"fsdp_kwargs": {"device_id": torch.device("cpu")}})):
                with self.subTest(name=name, mode=mode), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    theirs, mine = self._pair(name, mode, deterministic=True, **kwargs)
                    self.assertEqual([n for n, _ in theirs.named_parameters()], [n for n, _ in mine.named_parameters()])
                    self.assertEqual([(k, v.shape, v.dtype) for k, v in theirs.state_dict().items()],
                                     [(k, v.shape, v.dtype) for k, v in mine.state_dict().items()])
                    for (k, p), (_, q) in zip(theirs.state_dict().items(), mine.state_dict().items()):
                        torch.testing.assert_close(q, p, rtol=0, atol=0, msg=k)  # deterministic: seed 0, same order
                    self.assertEqual(str(theirs), str(mine))  # the same FSDP units around the same modules
                    inner_theirs = theirs.module if mode == "RECURSIVE" and name != "NestedWrappedModule" else theirs
                    inner_mine = mine.module if mode == "RECURSIVE" and name != "NestedWrappedModule" else mine
                    x, y = inner_theirs.get_input("cpu"), inner_mine.get_input("cpu")
                    for a, b in zip(x, y):
                        self.assertTrue(torch.equal(a, b))
                    out_theirs, out_mine = theirs(*x), mine(*y)
                    torch.testing.assert_close(out_mine, out_theirs, rtol=0, atol=0)
                    torch.testing.assert_close(inner_mine.get_loss(y, out_mine), inner_theirs.get_loss(x, out_theirs),
                                               rtol=0, atol=0)

    def test_shared_weight_and_ignored_modules(self):
        _, mine = self._pair("TransformerWithSharedParams", "NO_FSDP", add_bn=False)
        self.assertIs(mine.output_proj.weight, mine.embed_tokens.weight)
        self.assertIsInstance(mine.bn, torch.nn.Identity)
        self.assertEqual(mine.get_ignored_modules(), [mine.transformer])
        self.assertTrue(mine.training)  # not deterministic: left in training mode, as upstream's

    def test_an_unknown_init_mode_is_refused(self):
        with self.assertRaisesRegex(ValueError, "unsupported FSDPInitMode"):
            ours.NestedWrappedModule.init(self.group, "recursive", ours.DEVICEInitMode.DEVICE_NEVER)


if __name__ == "__main__":
    unittest.main()
