"""The reproducibility contract (flkit.numerics): same machine and kernel path, bit for bit; the second kernel
path of the test command is really another path; every stored run says where it was computed."""
from __future__ import annotations

import os
import platform
import subprocess
import sys

import pandas as pd
import pytest
import torch

import golden
from flkit import numerics

X86 = platform.machine() in ("x86_64", "AMD64")


def _kernel_path_in_a_fresh_process(env: dict) -> str:
    code = "import torch; from flkit import numerics; print(numerics.kernel_path())"
    base = {k: v for k, v in os.environ.items() if k not in numerics.SECOND_PATH}
    out = subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


def test_platform_names_cpu_kernel_path_and_libraries():
    p = numerics.platform()
    assert p["cpu"] == numerics.cpu_model() and p["cpu"]
    assert p["kernel_path"].split(",")[0] == torch.backends.cpu.get_cpu_capability()
    assert p["torch"] == torch.__version__ and p["threads"] == torch.get_num_threads()
    if X86:
        assert p["mkl"] and p["onednn"]     # the x86-64 wheels link MKL and oneDNN: their versions are named


@pytest.mark.skipif(not X86, reason="ATen's kernel paths and MKL are x86-64's")
def test_the_second_kernel_path_differs_from_the_machines_own():
    """scripts/test.sh re-runs the golden and regeneration tests under SECOND_PATH: it must take effect
    (ATen's scalar kernels, MKL's compatible branch) and differ from what this machine picks by itself."""
    assert _kernel_path_in_a_fresh_process(numerics.SECOND_PATH) == "DEFAULT, MKL_CBWR=COMPATIBLE"
    own = _kernel_path_in_a_fresh_process({})
    assert own != "DEFAULT, MKL_CBWR=COMPATIBLE" and own.split(",")[0] in ("AVX2", "AVX512", "ZVECTOR", "NEON")


def test_same_machine_same_path_bit_for_bit():
    """Contract, item 1: a float32 computation (a Fed-CVaR-Avg smoke run of two seeds on MNIST-sized models,
    or the synthetic 2-D runs where MNIST is absent) repeated in the same process gives the same bits."""
    from flkit import datasets
    name = "cvar_mnist" if datasets.available("mnist") else "cvar_synthetic_2d"
    a, b = golden.compute(name), golden.compute(name)
    pd.testing.assert_frame_equal(a, b, check_exact=True)
