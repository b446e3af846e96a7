"""The small models the suites share (our own versions of what upstream keeps in its private helpers)."""
from __future__ import annotations

import torch
import torch.nn as nn

# ---- fine-tuning and pipeline checkpoint scenarios (test_fine_tuning, test_pipeline) ----------------
# SECTION-DCP (owned by the DCP suites)

# ---- FSDP scenarios (test_fsdp_fine_tune, test_fully_shard_checkpoint) -------------------------------
# SECTION-FSDP (owned by the FSDP suites)
