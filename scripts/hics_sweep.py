"""Run the stored jobs of the HiCS-FL FMNIST training page (flkit.papers.hics.experiments) outside the notebook.

    PYTHONPATH=$PWD python scripts/hics_sweep.py reduced --part 0 --of 2 &
    PYTHONPATH=$PWD python scripts/hics_sweep.py reduced --part 1 --of 2

Each process runs every ``of``-th job (largest first) into the book's store (``results/hics``; "tmp/hics" for
smoke); the notebook then reads them from the store.
"""
import argparse

import torch

from flkit import datasets, results
from flkit.papers.hics import experiments as X

p = argparse.ArgumentParser()
p.add_argument("profile")
p.add_argument("--part", type=int, default=0)
p.add_argument("--of", type=int, default=1)
a = p.parse_args()
torch.set_num_threads(1)
cfg = X.profile(a.profile)
order = sorted(X.jobs(cfg), key=lambda j: j["group"] != "divfl")
mine = order[a.part::a.of]
store = results.book_store("hics" if a.profile != "smoke" else "tmp/hics")
data = datasets.load("fashion-mnist")
results.sweep(mine, lambda j: X.run_job(j, data), store, progress=True, desc=f"part {a.part}")
