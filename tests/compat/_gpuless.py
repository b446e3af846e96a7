"""These checks describe a machine without GPUs (where upstream's device-count idioms give 0 or 1)."""
import unittest


def skip_if_gpus() -> None:
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        raise unittest.SkipTest("this machine has GPUs; the check is for a GPU-less one")
