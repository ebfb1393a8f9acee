"""What every system shares: where evaluation sets come from, and the device."""
from __future__ import annotations

import torch

from internalize.config import Config

VAL_SEED, TEST_SEED = 1_000_003, 2_000_003  # evaluation sets are seeded apart from training


def device_for(config: Config) -> torch.device:
    if config.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for, but CUDA is not available here")
    return torch.device(config.device)
