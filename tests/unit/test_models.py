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
        self.assertEqual(dataclasses.asdict(ours.ModelArgs()), dataclasses.asdict(dtensor.ModelArgs()))

    def test_experts_are_refused_by_name(self):
        with self.assertRaisesRegex(NotImplementedError, "num_experts=2"):
            ours.TransformerBlock(ours.ModelArgs(num_experts=2))


if __name__ == "__main__":
    unittest.main()
