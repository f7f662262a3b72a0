"""The test problems of the MIFA chapter's theory page (quadratics of `flkit.tasks`, one local gradient step), with
the names their stored runs are configured under.

* :data:`FLOOR` (`symmetric_quadratic`, 10 clients): the error floors and derivation (i);
* :data:`MC_PROBLEM` (`quadratic_task`, the quadratic page's problem): the Monte Carlo of the stored entries and
  the general one-step analysis;
* the families of :func:`family` (n clients, d = 8): "convex", "nonconvex" (a non-convex term of weight 1) and
  their variants with heterogeneous client Hessians (suffix `common.HETERO`): the step-size conditions and the
  complexity tables;
* :data:`FLAT` (`flat_quadratic`): convex, not strongly convex, for the tables' epsilon-dependence.
"""
from __future__ import annotations

from flkit.papers.mifa.common import HETERO
from flkit.tasks import flat_quadratic, heterogeneous_quadratic, quadratic_task, symmetric_quadratic

__all__ = ["FLOOR", "floor_task", "MC_PROBLEM", "mc_task", "KINDS", "H_SPREAD", "ALL_KINDS", "METRIC", "base",
           "extra", "family", "kind_short", "SHORT", "flat_config", "flat_task"]

FLOOR = dict(n=10, dim=10, seed=0, mu=0.1, L=1.0, sigma_G2=1.0)
MC_PROBLEM = "quadratic_clients(10,10,0,mu=0.2,L=2)"       # as the stored runs name it
KINDS = {"convex": dict(lam=0.0, center_scale=1.0), "nonconvex": dict(lam=1.0, center_scale=2.0)}
H_SPREAD = 0.8          # the heterogeneous-Hessian variant of a family: client curvatures (1 +- 0.8) H_jj
ALL_KINDS = list(KINDS) + [k + HETERO for k in KINDS]
METRIC = {"convex": "gap", "nonconvex": "grad_norm2"}       # the criterion of each table
SHORT = {"fedgd": "FedGD", "fedpgd": "FedPGD", "umifa_saga": "U-MIFA (SAGA)", "mifa": "MIFA", "zerosarah": "ZeroSARAH"}


def floor_task():
    """The error-floor problem: `symmetric_quadratic` with the settings of :data:`FLOOR`."""
    return symmetric_quadratic(FLOOR["n"], FLOOR["dim"], FLOOR["seed"], mu=FLOOR["mu"], L=FLOOR["L"],
                               sigma_G2=FLOOR["sigma_G2"])


def mc_task():
    """The quadratic page's problem (10 clients, d = 10, spectrum 0.2 to 2): :data:`MC_PROBLEM`."""
    return quadratic_task(n=10, dim=10, seed=0, mu=0.2, L=2.0, heterogeneity=1.0)


def base(kind: str) -> str:
    """The family of a problem kind ("convex" or "nonconvex")."""
    return kind.removesuffix(HETERO)


def extra(kind: str) -> dict:
    """What the stored configuration of a heterogeneous-Hessian kind adds (nothing for the others)."""
    return {"h": H_SPREAD} if kind.endswith(HETERO) else {}


def family(n: int, kind: str):
    """The problem of `kind` with n clients, d = 8, mu = 0.1, L = 1, sigma_G^2 = 1."""
    if kind.endswith(HETERO):
        return heterogeneous_quadratic(n, 8, 0, mu=0.1, L=1.0, sigma_G2=1.0, h=H_SPREAD, **KINDS[base(kind)])
    return symmetric_quadratic(n, 8, 0, mu=0.1, L=1.0, sigma_G2=1.0, **KINDS[kind])


def kind_short(kind: str) -> str:
    """A panel title's first line."""
    return f"{base(kind)}, {'heterogeneous' if kind.endswith(HETERO) else 'identical'} Hessians"


def flat_config(n: int) -> dict:
    """The epsilon problem with n clients, as its stored runs name it."""
    return dict(generator="flkit.tasks.flat_quadratic", n=n, dim=32, seed=0, zeros=2, lam_min=1e-5, L=1.0,
                sigma_G2=0.1)


def flat_task(config: dict):
    """The `flat_quadratic` of :func:`flat_config`."""
    return flat_quadratic(**{k: v for k, v in config.items() if k != "generator"})
