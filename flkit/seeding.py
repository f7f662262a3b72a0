"""One independent random stream per (seed, concern).

Every experiment draws its data split, participation, model initialisation and minibatch order from
separate generators, so that all methods of a comparison see the same clients on the same rounds and
changing one concern (say, the minibatch order) leaves the others untouched.
"""
from __future__ import annotations

import zlib

import numpy as np
import torch

CONCERNS = ("data", "participation", "init", "batch")


def _entropy(seed: int, concern: str) -> list[int]:
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if not isinstance(concern, str) or not concern:
        raise ValueError(f"concern must be a non-empty string such as {CONCERNS}, got {concern!r}")
    return [int(seed), zlib.crc32(concern.encode())]


def rng(seed: int, concern: str) -> np.random.Generator:
    """NumPy generator for one concern ("data", "participation", "init", "batch", ...) of one seed."""
    return np.random.default_rng(_entropy(seed, concern))


def torch_gen(seed: int, concern: str, device: str | torch.device = "cpu") -> torch.Generator:
    """Torch generator for one concern of one seed, derived from the same stream as `rng`."""
    g = torch.Generator(device=device)
    g.manual_seed(int(rng(seed, concern).integers(2**63 - 1)))
    return g


def generator(seed, concern: str) -> np.random.Generator:
    """`rng(seed, concern)` for an int seed; a np.random.Generator passed in is used as it is."""
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be a non-negative int or a np.random.Generator, got {seed!r}")
    return rng(int(seed), concern)


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """"auto" picks CUDA when present; "cpu" and "cuda[:i]" are taken as given."""
    if isinstance(device, torch.device):
        return device
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu" or device.startswith("cuda"):
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"device={device!r} was asked for but CUDA is not available; use 'cpu' or 'auto'")
        return torch.device(device)
    raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:i]', got {device!r}")
