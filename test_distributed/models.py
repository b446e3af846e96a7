"""The small models the suites share (our own versions of what upstream keeps in its private helpers)."""
from __future__ import annotations

import torch
import torch.nn as nn

# ---- fine-tuning and pipeline checkpoint scenarios (test_fine_tuning, test_pipeline) ----------------
# SECTION-DCP (owned by the DCP suites)

#: upstream's width is 500; the checkpoint scenarios only need shapes FSDP splits unevenly over 4 ranks
DCP_DIM = 36

#: The models' activation is LeakyReLU with this slope where upstream's is ReLU. A ReLU unit that is
#: negative on every sample of a batch passes no gradient, so with ReLU whether a parameter trains, and
#: whether a loaded value reaches the output, depended on the seed: for some seeds whole layers got no
#: gradient, loss and parameter parity held trivially (all zeros), and 18 to 73 % of the Adam moments a
#: checkpoint test loaded were zeros a fresh optimizer has too. LeakyReLU's derivative is never zero, so
#: every parameter gets a gradient for every seed, and the suites can assert that every element trained.
NEG_SLOPE = 0.1


class PreTrainedModel(nn.Module):
    """The model pretrained and checkpointed in ``test_fine_tuning``: plain, nested and listed Linears."""

    def __init__(self, dim: int = DCP_DIM) -> None:
        super().__init__()
        self.layer1 = nn.Linear(dim, dim)
        self.layer2 = nn.Linear(dim, dim)
        self.layer3 = nn.Linear(dim, dim)
        self.sequential = nn.Sequential(nn.Linear(dim, dim), nn.LeakyReLU(NEG_SLOPE))
        self.module_list = nn.ModuleList([nn.Linear(dim, dim), nn.LeakyReLU(NEG_SLOPE)])
        self.act = nn.LeakyReLU(NEG_SLOPE)

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        x = self.act(self.layer1(batch))
        x = self.act(self.layer2(x))
        x = self.act(self.layer3(x))
        x = self.sequential(x)
        return self.module_list[1](self.module_list[0](x))


class FineTuningModel(nn.Module):
    """A frozen ``PreTrainedModel`` (``self.pretrain``) under three trainable Linears."""

    def __init__(self, dim: int = DCP_DIM) -> None:
        super().__init__()
        self.pretrain = PreTrainedModel(dim)
        self.pretrain.requires_grad_(False)
        self.layer1 = nn.Linear(dim, dim)
        self.layer2 = nn.Linear(dim, dim)
        self.layer3 = nn.Linear(dim, dim)
        self.act = nn.LeakyReLU(NEG_SLOPE)

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        x = self.act(self.pretrain(batch))
        x = self.act(self.layer1(x))
        x = self.act(self.layer2(x))
        return self.act(self.layer3(x))


class PipelineModel(nn.Module):
    """Four Linears run one after the other; ``stages()`` lists them, one pipeline stage each."""

    def __init__(self, dim: int = DCP_DIM) -> None:
        super().__init__()
        self.layer1 = nn.Linear(dim, dim)
        self.layer2 = nn.Linear(dim, dim)
        self.layer3 = nn.Linear(dim, dim)
        self.layer4 = nn.Linear(dim, dim)
        self.act = nn.LeakyReLU(NEG_SLOPE)

    def stages(self) -> list[nn.Linear]:
        return [self.layer1, self.layer2, self.layer3, self.layer4]

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        for layer in self.stages():
            batch = self.act(layer(batch))
        return batch


# ---- FSDP scenarios (test_fsdp_fine_tune, test_fully_shard_checkpoint) -------------------------------
# SECTION-FSDP (owned by the FSDP suites)

#: upstream uses 100; 9 keeps the CPU runs fast and makes every dim-0 shard uneven over 2 ranks (5 + 4)
FSDP_DIM = 9


class UnitModule(nn.Module):
    """Upstream's ``UnitModule``: the unit ``fully_shard`` wraps (Linear, act-Linear-act, Linear), with
    LeakyReLU for ReLU (see ``NEG_SLOPE``)."""

    def __init__(self, device: torch.device | str, dim: int = FSDP_DIM) -> None:
        super().__init__()
        self.l1 = nn.Linear(dim, dim, device=device)
        self.seq = nn.Sequential(nn.LeakyReLU(NEG_SLOPE), nn.Linear(dim, dim, device=device), nn.LeakyReLU(NEG_SLOPE))
        self.l2 = nn.Linear(dim, dim, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(self.seq(self.l1(x)))


class CompositeParamModel(nn.Module):
    """Upstream's ``CompositeParamModel``: a Linear, two ``UnitModule``s, a bare Parameter ``p`` and a
    persistent buffer, so a state dict mixes wrapped, unwrapped and non-parameter entries."""

    def __init__(self, device: torch.device | str, dim: int = FSDP_DIM) -> None:
        super().__init__()
        self.l = nn.Linear(dim, dim, device=device)
        self.u1 = UnitModule(device, dim)
        self.u2 = UnitModule(device, dim)
        self.p = nn.Parameter(torch.randn((dim, dim), device=device))
        self.register_buffer("buffer", torch.randn((dim, dim), device=device), persistent=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.u2(self.u1(self.l(x)))
        return nn.functional.leaky_relu(a @ self.p, NEG_SLOPE)


class TransformerWithSharedParams(nn.Module):
    """Upstream's ``TransformerWithSharedParams``, smaller: an embedding tied to the output projection
    (one Parameter under two names), a 2+2 layer ``nn.Transformer``, a BatchNorm (running stats and an
    integer ``num_batches_tracked``) and two extra buffers, one of them integer."""

    VOCAB = 23  # odd, so the tied (VOCAB, D_MODEL) weight shards unevenly
    D_MODEL = 16

    def __init__(self, device: torch.device | str, d_model: int = D_MODEL, vocab: int = VOCAB) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, d_model, device=device)
        self.transformer = nn.Transformer(d_model=d_model, nhead=2, num_encoder_layers=2, num_decoder_layers=2,
                                          dim_feedforward=8, dropout=0.0, batch_first=True, device=device,
                                          activation="gelu")  # no dead units, see NEG_SLOPE
        self.output_proj = nn.Linear(d_model, vocab, device=device)
        self.output_proj.weight = self.embed_tokens.weight  # the shared parameter
        self.bn = nn.BatchNorm1d(d_model, device=device)
        self.register_buffer("vocab_bias", torch.ones((d_model,), device=device))
        self.register_buffer("long_buffer", torch.zeros((d_model,), dtype=torch.long, device=device))

    def get_input(self, device: torch.device | str, batch: int = 2, seq: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
        vocab = self.embed_tokens.num_embeddings
        src = torch.randint(0, vocab, (batch, seq), device=device)
        tgt = torch.randint(0, vocab, (batch, seq - 1), device=device)
        return src, tgt

    def get_ignored_modules(self) -> list[nn.Module]:
        return [self.transformer]

    def forward(self, src_ids: torch.Tensor, tgt_ids: torch.Tensor) -> torch.Tensor:
        src = self.embed_tokens(src_ids) + self.vocab_bias + self.long_buffer.type_as(self.vocab_bias)
        tgt = self.embed_tokens(tgt_ids)
        tgt = self.bn(tgt.transpose(1, 2)).transpose(1, 2)
        return self.output_proj(self.transformer(src, tgt))


@torch.no_grad()
def zero_model(model: nn.Module, zero_buffers: bool = False) -> None:
    """Upstream's ``_zero_model`` without ``summon_full``: zero every parameter (each rank its own shard
    when they are DTensors) and, if asked, every buffer."""
    for param in model.parameters():
        param.zero_()
    if zero_buffers:
        for buffer in model.buffers():
            buffer.zero_()
