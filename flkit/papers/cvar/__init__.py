r"""Fed-CVaR-Avg (document 003, Algorithm 1) under a random access model (RAM).

Symbols of the document
-----------------------
K            users, i = 1..K; each holds a private dataset D_i with N_i samples.
rho_i        RAM probabilities (sum 1): each round the RAM relays exactly one user, I ~ rho, i.i.d.
             across rounds. Neither the server nor the users know rho.
f_i(theta)   user i's empirical loss (mean cross-entropy over D_i).
alpha        CVaR level ("confidence level a"), alpha in (0, 1]; alpha = 1 is risk-neutral.
gamma        trade-off between CVaR and expectation, gamma in [0, 1]; gamma = 1 is risk-neutral.
t            CVaR threshold (the value-at-risk variable of (3)), trained jointly with theta; t^1 = 0.
eta_theta,   step sizes of theta and t (plain SGD, a step after every minibatch).
eta_t
H            local epochs per round; B minibatch size; T rounds.

The local objective (6) of user i is

    G_i(theta, t) = (1 - gamma) [ t + (1/alpha) [f_i(theta) - t]_+ ] + gamma f_i(theta),

estimated on a minibatch b by replacing f_i with the batch-mean loss F_b(theta) (as the authors' code
does: the risk is over *users'* losses, the batch mean is the user-loss estimate). Its (sub)gradients,
with the convention 1[F_b > t] (PyTorch's relu'(0) = 0), are

    grad_theta G = ((1 - gamma)/alpha * 1[F_b > t] + gamma) grad_theta F_b,
    d G / d t    = (1 - gamma) (1 - 1[F_b > t] / alpha).

Algorithm 1 (FED-CVaR-AVG): every round n the RAM relays the (theta, t) of one user; the server
broadcasts it; every user starts from it, runs H epochs of joint SGD on G_i and forwards the result
to the RAM. Since the RAM discards all but one user's result and every user starts from the same
broadcast, the global model obeys

    (theta^{n+1}, t^{n+1}) = LocalSGD_{I_n}(theta^n, t^n),    I_n ~ rho i.i.d.,

i.e. one SGD trajectory whose data source switches each round. We simulate exactly that: only the
relayed user trains (the document's all-users loop, and the authors' MNIST script, train the K - 1
others too and throw their results away; the FashionMNIST script already trains only the selected
user). With alpha = 1, t stays at t^1 = 0 < F_b (a cross-entropy is positive), so the weight of
grad F_b is exactly 1 and Algorithm 1 *is* FedAvg with one relayed user; the same holds for gamma = 1.

Vectorization across runs
-------------------------
M runs (seeds x grid cells) are M stacked models trained in one computation. In each round every
run draws its own relayed user from its own RAM stream and its minibatches from that user's data
only. Users differ in size, so runs differ in their number of steps per round: the batch index
tensor is (M, S, B) with S the largest step count of the round; each run's valid steps come first
and later steps are masked (the model is left unchanged). A last, partial minibatch of an epoch is
padded with a dummy sample whose label is ignored by the loss, so the batch mean is over its real
samples only (the authors' DataLoader keeps partial batches; in the 30-user 2-D example a user has
fewer samples than one batch).

Randomness: one stream per (seed, concern) from `flkit.seeding`: "data" (split), "participation"
(the RAM draws, through `flkit.participation.random_access_indices`), "init" (model
initialisation) and "batch/<round>" (the minibatch order of a round), so a run's numbers do not
depend on which other runs share its batch, and a run resumed from a checkpoint continues exactly.

Modules
-------
flkit.objectives  G, its (sub)gradients, the minibatch surrogate of the local steps (cvar_objective)
algorithm     State, init, Users, learning_rates, run_round (Algorithm 1 for M runs; local steps and
              minibatches are flkit.engine's: local_train / FastSGD, epoch_batches)
ram           the RAM distributions: Fig. 2(a)/(b), the authors' 30-user vector (Fig. 2(c), Figs. 3-4,
              Table 1) and the random-draw variant
common        what the pages share: the document's settings and the profiles (`settings`), one config per
              run (`run_configs`), the rare classes, final accuracies, curves and titles
runs          the data and split of a run, run_batch (vectorized, checkpointed), the results store (sweep, stored)
items         the document's items the pages test, and each page's checks filed under them
synthetic_2d  the page of Fig. 2 (decision regions; the authors' model quirks separated)
mnist         the page of Figs. 3-4 (the reading of the rare classes; its diagnosis)
fmnist_table  the page of Table 1 (the document's numbers beside ours; its five statements)
diagnosis     Figs. 3-4: the runs that tell the explanations of the small rare-class gain apart
weights       Figs. 3-4: the gradient weight each user group received, read off the stored thresholds
sweeps        what ``python -m flkit.sweep cvar <experiment>`` runs: the options, the estimate, the pack for a GPU
              window

A page imports its module by name (``from flkit.papers.cvar import mnist``); each page module has `PROFILES`
and `profile(name, **overrides)`. The package itself exports only what the sweep (`sweeps`), the ledger and the
chapter "Across the documents" use to run the chapter's runs (`settings`, `run_configs`, `run_batch`, `sweep`,
`prepare`, ...).
"""
from __future__ import annotations

from flkit.papers.cvar.algorithm import EXTRAS
from flkit.papers.cvar.common import PAPER, batch_group, run_configs, settings
from flkit.papers.cvar.runs import Deadline, build_model, planned_steps, prepare, run_batch, store_for, stored, sweep

__all__ = ["PAPER", "settings", "run_configs", "batch_group", "run_batch", "Deadline", "sweep", "stored", "store_for",
           "planned_steps", "prepare", "build_model", "EXTRAS"]
