"""The reproducibility contract: which numbers are identical where, and the platform each result records.

1. Same machine, same software, same kernel path: bit for bit. The same call twice, and a run resumed from a
   checkpoint against the uninterrupted run, give identical numbers (tests/test_fl.py, tests/test_cvar.py).
2. Across x86-64 CPUs: not bit for bit. PyTorch (ATen) picks its vector kernels by CPU (`kernel_path`:
   DEFAULT, AVX2 or AVX512), and MKL picks its own code branch (MKL_CBWR) by CPU vendor and model; sums are
   then accumulated in another order, and a float32 result moves in its last bits. Tests compare such
   results within tolerances derived from float precision and each quantity's sensitivity (tests/golden.py
   `TOLERANCE` and `compare`, tests/test_regenerate.py), and the test command runs the golden and
   regeneration tests once more under a second kernel path (`SECOND_PATH`), so a test that holds on one CPU
   only fails on any machine. Quantities on a lattice (an accuracy counts test samples; Fed-CVaR-Avg's
   threshold t moves in steps of lr_t (1 - gamma) / alpha) are compared on their lattice, with a bounded
   number of flipped samples or steps.
3. A pinned path (`SECOND_PATH`: ATen's scalar kernels and MKL's SSE2-compatible branch) is deterministic
   on one machine; whether it is identical on Intel and AMD CPUs cannot be checked on one machine, and it is
   slower (benchmarks/bench_kernel_path.py), so the book does not depend on it.

Every stored run records `platform()` in its manifest (flkit.results), so a page can say where its runs
were computed and a regenerated number can be told apart from the stored one by its platform.
"""
from __future__ import annotations

import os
import platform as _platform
import re
import sys
from functools import lru_cache

__all__ = ["SECOND_PATH", "cpu_model", "kernel_path", "platform"]

# The second kernel path of the test command (scripts/test.sh): ATen's scalar kernels and MKL's
# SSE2-compatible branch differ from every x86-64 machine's own choice (AVX2 or AVX512, MKL's AUTO).
SECOND_PATH = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return _platform.processor() or _platform.machine()


@lru_cache(maxsize=1)
def _library_versions() -> dict:
    import torch
    text = torch.__config__.show()
    mkl = re.search(r"Math Kernel Library Version ([\w.\-]+)", text)
    dnn = re.search(r"MKL-DNN v([\w.]+)", text)
    return {"mkl": mkl.group(1) if mkl else None, "onednn": dnn.group(1) if dnn else None}


def kernel_path() -> str:
    """ATen's CPU kernels and MKL's branch in use, e.g. "AVX512, MKL_CBWR=AUTO" (torch is imported)."""
    import torch
    return f"{torch.backends.cpu.get_cpu_capability()}, MKL_CBWR={os.environ.get('MKL_CBWR') or 'AUTO'}"


def platform() -> dict:
    """Where a result is computed: CPU model, kernel path, threads and library versions (and the GPU when
    CUDA is in use). torch is never imported just for this: without it, only the CPU and Python."""
    out = {"cpu": cpu_model(), "machine": _platform.machine(), "python": _platform.python_version()}
    torch = sys.modules.get("torch")
    if torch is None:
        return out
    out.update(kernel_path=kernel_path(), threads=torch.get_num_threads(), torch=torch.__version__,
               **_library_versions())
    try:
        if torch.cuda.is_available():
            out.update(gpu=torch.cuda.get_device_name(), cuda=torch.version.cuda)
    except Exception:  # pragma: no cover - broken CUDA set-ups
        pass
    return out
