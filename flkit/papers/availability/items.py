"""The chapter's checks as the scorecard records them: which item of document 001 each check of a page tests.

Each page keeps its checks under short keys (``"unbiased"``, ``"thm2"``, ``"5/6, exact"``); :data:`KEYS`
maps every key of every page to the id of the item it tests in ``flkit/papers/items/001.yaml`` and, where the
page states its criterion only inside its sentence, to the rule in words. :func:`check` turns one of the
page's pass/fail criteria into a :class:`~flkit.papers.claims.Check` (``claims.holds``: the criterion itself
is not changed), and :func:`by_item` groups a page's checks by item for ``scorecard.record("001", ...)``.
A page keeps its checks in a :class:`Checks` ledger: each criterion printed as it is decided, the ledger read
by the page's prose (how many agree, which failed) and handed to the scorecard (:meth:`Checks.by_item`).

Items of the notes keep the notes' words. A few checks test statements that are not in the notes (the CA-Fed
repository's README and exclusion rule, the link between FedAU's and CA-Fed's chains); their items say
"beyond the notes" and stand at the end of the YAML file.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

from flkit.papers import claims
from flkit.papers.availability.common import DOC
from flkit.papers.claims import Check

__all__ = ["DOC", "ITEM", "KEYS", "ALIASES", "check", "by_item", "item_of", "key_of", "Checks"]

# the items of 001.yaml that the pages check, by a short name
ITEM = {
    "aggregator": "Eq. (aggregator): w_{k+1,0} = sum_i alpha_i w_{k,E}^(i), sum_i alpha_i = 1",
    "fairness": "Claim: alpha_i = 1/N is per-client fairness, alpha_i = |S_i| / sum_j |S_j| per-sample fairness",
    "normalized": ("Eq. (normalized aggregation over A_k): w_{k+1,0} = sum_{A_k} q_i w^(i) / sum_{A_k} q_i, "
                   "'we consider this aggr. scheme until we say so'"),
    "unnormalized": ("Eq. (unnormalized aggregation): w_{k+1,0} = w_{k,0} + gamma_s sum_{A_k} q_i (w^(i) - w_{k,0}) "
                     "~ -grad F, 'UNBIASED'"),
    "less_variance": "Claim: 'BIASED BUT LESS VARIANCE'",
    "three_clients": "Example: three clients, alpha_i = 1/3, pi ~ (1/2, 1/6, 1), q = (2, 6, 1)",
    "F_B": ("Claim: we optimize the biased F_B = sum_i p_i F^(i) != sum_i alpha_i F^(i), "
            "p_i = pi_i q_i / sum_j pi_j q_j"),
    "case_1": "Claim: all clients always available (pi_i = 1): p_i proportional to q_i, so q_i = alpha_i gives p_i = "
        "alpha_i",
    "case_2": "Claim: all clients equally available (pi_i = pi): q_i = alpha_i gives p_i = alpha_i, F_B = F_T",
    "case_3": "Claim: in general, q_i = alpha_i / u_i gives p_i = alpha_i",
    "biased_ok": "Claim: optimizing a biased F_B != F_T may make sense if it is easier than optimizing F_T",
    "eq4": "Eq. (4)",
    "thm1": "Theorem 1",
    "thm2": "Theorem 2",
    "eq11": "Eq. (11)",
    "lambda_P": "Eq. (lambda(P)): lambda(P) = max_u R_2(P_u)",
    "correlation": ("Claim: lambda_2(P) affects time correlation: |lambda_2(P)| ~ 1 highly correlated, -> 0 no "
                    "correlation"),
    "lesson": ("Claim (what we learn from Theorem 2): to speed up training, ignore clients with low availability "
               "and clients highly correlated over time"),
    "fedavg": ("Algorithm: FedAvg (Google): pick N clients uniformly from A_k, w_{k+1,0} = (1/N) sum_{B_k} q_i "
               "w^(i)"),
    "fedavg_bias": "Claim: FedAvg is still prone to the bias due to heterogeneous client availability",
    "five_sixths": "Example: N = 2, Prob(1 in B_k) = 1/2 * 1 + 1/2 * 2/3 = 5/6 < 1",
    "li": ("Claim: convergence of FedAvg with M clients under two sampling strategies (Li et al.): 1) prob. N/M, "
           "q_i = alpha_i; 2) selected w.p. alpha_i, q_i = 1/M"),
    "30K": "Claim: practical numbers, 20 x 7 x 2 x 100 ~ 30K check-ins",
    "comm": "Claim: communication cost |S_1| + ... + |S_N| (data) against sum_k |B_k| size(model) = K N size(model)",
    "gamma_s": "Claim: with a variable number of clients the update is quite noisy, so gamma_s must be small",
    "topk": ("Claim: reduce communication by compression, top-k not necessarily of w_{k,E}^(i) but of "
             "w_{k,E}^(i) - w_{k,0}"),
    # beyond the notes
    "fedau_map": "Beyond the notes: FedAU's Markov parameters (x, p) are CA-Fed's (pi = p, lambda = 1 - x/p)",
    "cafed_rule": "CA-Fed code (beyond the notes): the greedy exclusion rule on four clients, by hand",
    "readme_time_avg_synthetic": "CA-Fed README (beyond the notes): CA-Fed achieves a higher time-average accuracy, "
        "synthetic",
    "readme_std_synthetic": "CA-Fed README (beyond the notes): CA-Fed achieves a lower standard deviation, synthetic",
    "readme_time_avg_mnist": "CA-Fed README (beyond the notes): CA-Fed achieves a higher time-average accuracy, MNIST",
    "readme_std_mnist": "CA-Fed README (beyond the notes): CA-Fed achieves a lower standard deviation, MNIST",
}

# page -> {the page's check key: (item, the page's criterion in words, or None where the page passes its own)}
KEYS: dict[str, dict[str, tuple[str, str | None]]] = {
    "weights": {
        "fair_runs": ("aggregator", "distance of fl.run's final iterate to its own closed-form minimizer <= 1e-10"),
        "fair_differ": ("fairness", "distance between the two minimizers > 1e-6 on every problem"),
        "limit_norm_FB": ("normalized", "the rule's limit m minimizes the notes' F_B: |m - w_B*|^2 <= 1e-20 in "
                                        "every (case, q)"),
        "unbiased": ("unnormalized", "exact ||E G - grad F_T||^2 <= 1e-20 at every point"),
        "agg_mc": ("less_variance", "Monte Carlo against exact enumeration: every |z| <= 4"),
        "normalized_biased": ("less_variance", "exact ||E G - grad F_T||^2 > 1e-6 for both normalized rules"),
        "var_alpha_pi": ("less_variance", "exact variance below the unnormalized rule's in every (pi_min, point) "
                                          "setting with pi_min < 1"),
        "var_fedavg": ("less_variance", "exact variance below the unnormalized rule's in every (pi_min, point) "
                                        "setting with pi_min < 1"),
        "floor_exact": ("less_variance", "measured floors against the exact recursion: every |z| <= 4"),
        "example_mc": ("three_clients", "Monte Carlo against the exact effective weights: every |z| <= 4"),
        "example_p": ("three_clients", "exact rational equality p_i = 1/3"),
        "example_unnorm": ("three_clients", "exact rational equality of the expected weights with alpha = 1/3"),
        "example_norm": ("three_clients", "exact effective weights differ from 1/3"),
        "limit_exact": ("eq4", "final squared distances against their exact expectations: every |z| <= 4"),
        "limit_unnorm_FB": ("eq4", "the rule's limit m minimizes the notes' F_B: |m - w_B*|^2 <= 1e-20 in every "
                                   "(case, q)"),
        "case_1": ("case_1", "|w_B* - w_T*|^2 <= 1e-20"),
        "case_2": ("case_2", "|w_B* - w_T*|^2 <= 1e-20"),
        "case_3": ("case_3", "|w_B* - w_T*|^2 <= 1e-20"),
        "gs_below": ("gamma_s", "exact mean-square stability limit (enumeration of the 2^N patterns) below the "
                                "fixed-weights limit 2/lambda_max(sum_i alpha_i A_i) at every pi_min < 1, equal at "
                                "pi_min = 1 (1e-9)"),
        "gs_falls": ("gamma_s", "exact limit non-increasing as pi_min decreases"),
        "gs_closed": ("gamma_s", "one Hessian for all: |limit ratio - E[S]^2/E[S^2]| <= 1e-12 at every pi_min"),
        "gs_runs": ("gamma_s", "fl.run floors at fractions of the limit against the exact recursion: every |z| <= 4"),
    },
    "markov": {
        "autocorrelation": ("correlation", "exact from P^s to < 1e-12 and every simulated mean within 4 standard "
                                           "errors of lambda^s"),
        "mixing": ("correlation", "exact to < 1e-12 and every simulated signed distance within 4 standard errors"),
        "joint": ("lambda_P", "|second eigenvalue modulus of the joint chain - max_k |lambda_k|| < 1e-12"),
        "map": ("fedau_map", "same P and lambda_2 = 1 - x/p to < 1e-12 on the feasible pairs; the rescaled pairs "
                             "are exactly the infeasible ones"),
        "thm1_random": ("thm1", "epsilon / (epsilon_opt + epsilon_bias) <= 1 on every random problem"),
        "thm1_tight": ("thm1", "largest ratio found <= 1 + 1e-9 and the two-client formula within 1e-8 of the "
                               "numerical supremum"),
        "thm2": ("thm2", "the error at the budget increases by more than 3 standard errors at every step of the "
                         "grid 0 <= lambda < 1"),
        "exclusion": ("biased_ok", "excluding the unavailable-stable clients lowers F_B(w_T) - F_B* below the "
                                   "unbiased strategy's F(w_T) - F* at every budget, and the bias is positive"),
        "steps": ("eq11", "partial sums within 1e-6 (relative) of their large-T forms, and the schedules used have "
                          "1/2 < a <= 1"),
    },
    "sampling": {
        "5/6, exact": ("five_sixths", None),
        "5/6, package law": ("five_sixths", None),
        "5/6, Monte Carlo": ("five_sixths", None),
        "inclusion law, Monte Carlo": ("fedavg", None),
        "FedAvg q=1 converges to argmin F_B": ("fedavg_bias", None),
        "FedAvg q=alpha/P converges to argmin F_T": ("fedavg_bias", None),
        "both schemes unbiased, exact": ("li", None),
        "variance: enumeration = closed form": ("li", None),
        "both schemes unbiased, Monte Carlo": ("li", None),
        "variances, Monte Carlo": ("li", None),
        "the notes' 30K": ("30K", None),
        "uploads = K N, full availability": ("comm", None),
        "uploads = K E min(N, |A_k|)": ("comm", None),
        "top-k error smaller for the update than for the model": ("topk", None),
        "top-k accuracy: update > model": ("topk", None),
    },
    "cafed": {
        "notes' p": ("F_B", "|measured share - notes' p| <= 3 standard errors over the seeds"),
        "worked example": ("cafed_rule", "exclusion order [3, 2, 1], E values to 1e-12, allocation (0.5, 0, 0, 0)"),
        "lesson, synthetic": ("lesson", None),
        "lesson, MNIST": ("lesson", None),
        "README time-average, synthetic": ("readme_time_avg_synthetic", None),
        "README std, synthetic": ("readme_std_synthetic", None),
        "README time-average, MNIST": ("readme_time_avg_mnist", None),
        "README std, MNIST": ("readme_std_mnist", None),
    },
}


# page -> (start of a check's name, its key): checks made once per setting (one per availability, one per
# compression level) share the key of their criterion
ALIASES: dict[str, tuple[tuple[str, str], ...]] = {
    "sampling": (("accuracy after", "top-k accuracy: update > model"),
                 ("uploads = K E min", "uploads = K E min(N, |A_k|)")),
}


def key_of(page: str, name: str) -> str:
    """The key in :data:`KEYS` of the check `name` of `page`: the name itself, or the key its start stands for
    (:data:`ALIASES`)."""
    for start, key in ALIASES.get(page, ()):
        if name.startswith(start):
            return key
    return name


def _entry(page: str, key: str) -> tuple[str, str | None]:
    if page not in KEYS:
        raise ValueError(f"page {page!r} is not one of {sorted(KEYS)}")
    if key not in KEYS[page]:
        raise ValueError(f"page {page!r} has no check {key!r}; its checks: {sorted(KEYS[page])}")
    return KEYS[page][key]


def item_of(page: str, key: str) -> str:
    """The id (in ``items/001.yaml``) of the item that check `key` of `page` tests."""
    return ITEM[_entry(page, key)[0]]


def check(page: str, key: str, what: str, ok: bool, rule: str | None = None, *, ours: float = math.nan,
          reference: float = math.nan, spread: float = math.nan) -> Check:
    """One of the page's pass/fail criteria as a Check ("agrees" when `ok`): `rule` is the criterion in words,
    by default the one :data:`KEYS` gives for the key; `spread` the standard error of `ours` where it has one."""
    default = _entry(page, key)[1]
    rule = rule if rule is not None else default
    if rule is None:
        raise ValueError(f"page {page!r}, check {key!r}: KEYS gives no rule, pass `rule`")
    return dataclasses.replace(claims.holds(what, ok, rule, ours=ours, reference=reference), spread=float(spread))


def by_item(page: str, checks: Iterable[tuple[str, Check]]) -> dict[str, list[Check]]:
    """The page's checks, given as (key, Check) pairs, grouped by the item they test (for ``scorecard.record``)."""
    out: dict[str, list[Check]] = {}
    for key, c in checks:
        if not isinstance(c, Check):
            raise TypeError(f"page {page!r}, check {key!r}: expected a claims.Check, got {type(c).__name__}")
        out.setdefault(item_of(page, key), []).append(c)
    return out


class Checks:
    """A page's checks in the order the page makes them (a name may recur: one check per setting).

    :meth:`add` decides one of the page's pass/fail criteria: it prints "agrees: <what>" or "DISAGREES: <what>"
    (with " (<rule>)" when the rule is given here) and keeps it as a Check (:func:`check`; its key from the name,
    :func:`key_of`; with `section`, the scorecard's row reads "Section <section>: <what>"). :meth:`keep` keeps a
    Check made by a claims rule, unprinted. The page's prose reads :meth:`ok`, :attr:`n_agree` and ``len``;
    :meth:`by_item` hands them to the scorecard."""

    def __init__(self, page: str):
        if page not in KEYS:
            raise ValueError(f"page {page!r} is not one of {sorted(KEYS)}")
        self.page = page
        self.entries: list[tuple[str, str, Check]] = []        # (name, key, check)

    def add(self, name: str, ok, what: str | None = None, rule: str | None = None, *, section: str | None = None,
            ours: float = math.nan, reference: float = math.nan, spread: float = math.nan,
            echo: bool = True) -> None:
        """Keep the check `name` (passed when `ok`; `what` is checked, default: the name) and, with `echo`, print
        it."""
        ok, what = bool(ok), name if what is None else what
        key = key_of(self.page, name)
        row = what if section is None else f"Section {section}: {what}"
        self.keep(key, check(self.page, key, row, ok, rule, ours=ours, reference=reference, spread=spread), name)
        if echo:
            print(("agrees" if ok else "DISAGREES") + f": {what}" + (f" ({rule})" if rule is not None else ""))

    def keep(self, key: str, c: Check, name: str | None = None) -> None:
        """Keep a Check under `key` (an entry of :data:`KEYS` for the page), by `name` (default: the key)."""
        _entry(self.page, key)
        if not isinstance(c, Check):
            raise TypeError(f"page {self.page!r}, check {key!r}: expected a claims.Check, got {type(c).__name__}")
        self.entries.append((key if name is None else name, key, c))

    def ok(self, *names: str) -> bool:
        """Whether every check of these names passed (each name must have been checked)."""
        missing = [n for n in names if n not in {e[0] for e in self.entries}]
        if missing:
            raise KeyError(f"page {self.page!r} has no check named {missing}")
        return all(c.ok for n, _, c in self.entries if n in names)

    def verdicts(self) -> dict[str, bool]:
        """Name -> passed, in the order the checks were made (a recurring name: all of its checks passed)."""
        out: dict[str, bool] = {}
        for n, _, c in self.entries:
            out[n] = out.get(n, True) and c.ok
        return out

    @property
    def n_agree(self) -> int:
        return sum(c.ok for _, _, c in self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def by_item(self) -> dict[str, list[Check]]:
        """The checks grouped by the item they test, for ``scorecard.box`` and ``scorecard.record``."""
        return by_item(self.page, [(k, c) for _, k, c in self.entries])
