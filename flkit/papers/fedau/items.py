"""Which item of document 000 each check of the FedAU pages tests (for `flkit.papers.scorecard.record`).

The pages build their claim checks as before (`claims.Check`, named by `what`); :func:`by_item` files each
under the item of ``flkit/papers/items/000.yaml`` it tests, by the first rule of the page whose key occurs
in the check's `what`. A check that no rule files raises, so that a page cannot record a check under no
item or drop one silently.

Filed by our judgement, where the document has no item of exactly that content:
* weights page, "cyclic: omega_T = exact finite-horizon closed form": a property of Algorithm 2 under the
  cyclic pattern (our derivation), filed under Algorithm 2;
* weights page, "FedAU: 3 floats per client": filed with the "250 x memory" of MIFA and FedVarp (the
  contrast the table's row labels draw).
"""
from __future__ import annotations

from collections.abc import Iterable

from flkit.papers.claims import Check

__all__ = ["DOC", "RULES", "by_item"]

DOC = "000"

THM1 = "Theorem 1"
OMEGA = ("Claim (slide 'Improper Choice of Aggregation Weights Causes Bias'): omega_n = 1/p_n is consistent with f, "
         "omega_n = 1 is biased toward frequent clients")
ESTIMATE = ("Eq. (slide 'How to Estimate Aggregation Weights?'): omega_n = 1/p_n with p_n estimated by "
            "(1/T) sum_t I_t^n")
INTERVALS = ("Claim (slide 'How to Estimate Aggregation Weights?'): the inverse participation rate equals the average "
             "of the intervals")
CUTOFF_BIAS = ("Claim (slide 'How to Estimate Aggregation Weights?'): smaller K gives lower variance and higher bias, "
               "larger K the reverse")
ALG2 = "Algorithm 2"
ASSUMPTION5 = "Assumption 5"
THM3 = "Theorem 3"
GEOMETRIC = "Eq. (proof of Theorem 3): the cutoff geometric distribution, E[S_n] and Var[S_n]"
THM3_PROOF = "Eq. (proof of Theorem 3): E[(p_n omega_t^n - 1)^2] split into variance and bias, and its bounds"
COR4_PROOF = "Eq. (proof of Corollary 4): (1 - min_n p_n)^(2 log_c T) = 1/T"
COR4 = "Corollary 4"
THM2 = "Theorem 2"
LEMMA = "Lemma B.3.3"
PROBLEM1 = "Problem 1"
LARGE = ("Claim (slide 'How to Estimate Aggregation Weights?'): large intervals cause large overestimates of omega "
         "and instability")
OVERFITTING = "Fig. (slide 'Overfitting when Only Training on a Single Device's Data')"
CUTOFF_FIG = ("Fig. (slide 'Experiments (cont'd)'): FedAU with different cutoff K and minimum participation "
              "probability")
T_PART = "Claim (table): FedAU (K → ∞) beats average participating under all three patterns"
T_ALL = "Claim (table): FedAU (K → ∞) beats average all under all three patterns"
T_KNOWN = "Claim (table): FedAU (K → ∞) does about as well as known participation statistics"
T_K50 = "Claim (table): FedAU with K = 50 does better than with K → ∞"
T_MEMORY_BEHIND = "Claim (table): MIFA and FedVarp fall behind FedAU under cyclic participation"
MEMORY = "Claim (table): MIFA and FedVarp need 250 × the memory"
STATIONARY = "Claim (slide 'Experiments (cont'd)'): the same stationary probability for all participation patterns"

# page -> [(a key that occurs in the check's `what`, the item it tests)], first match wins
RULES: dict[str, list[tuple[str, str]]] = {
    "overfitting": [("", OVERFITTING)],
    "theory": [
        ("Corollary 4", COR4),                          # before "Theorem 2": its checks use Theorem 2's bound
        ("Theorem 2", THM2),                            # before "Lemma B.3.3": its checks bound the lemma's bracket
        ("Lemma B.3.3", LEMMA),
        ("Problem 1", PROBLEM1),
        ("Large intervals", LARGE),
        ("bias fraction of omega=1", OMEGA),            # omega=1 and omega=1/p: the claim on the two weightings
        ("Thm 1", THM1),
        ("Interval-mean identity", INTERVALS),
        ("Cutoff geometric", GEOMETRIC),
        ("Recorded intervals", GEOMETRIC),
        ("Cor. 4", COR4_PROOF),
        ("Thm 3 proof", THM3_PROOF),
        ("Thm 3:", THM3),
        ("Assumption 5", ASSUMPTION5),
    ],
    "weights": [
        ("exact long-run rate", STATIONARY),
        ("simulated rate", STATIONARY),
        ("z^2 of the simulated rates", STATIONARY),
        ("largest |z|", STATIONARY),
        ("|A_n/L - p_n|", STATIONARY),
        ("Algorithm 2 (printed)", ALG2),
        ("exact finite-horizon closed form", ALG2),
        ("cutoff geometric law", GEOMETRIC),
        ("K = inf: omega_T", ESTIMATE),
        ("K = 50: omega_T", CUTOFF_BIAS),
        ("250 x d floats", MEMORY),
        ("floats per client", MEMORY),
    ],
    "table": [
        (">= Average participating", T_PART),
        (">= Average all", T_ALL),
        ("of known p", T_KNOWN),
        ("FedAU (K = 50) >= FedAU (K = inf)", T_K50),
        ("cyclic: FedAU (K = inf) >= MIFA", T_MEMORY_BEHIND),
        ("cyclic: FedAU (K = inf) >= FedVarp", T_MEMORY_BEHIND),
    ],
    "cutoff": [("p_min = ", CUTOFF_FIG)],
}


def by_item(page: str, checks: Iterable[Check]) -> dict[str, list[Check]]:
    """{item id: [checks]} of one FedAU page (`page` in RULES), every check filed by the page's rules."""
    if page not in RULES:
        raise ValueError(f"page {page!r} is not a FedAU page; choose one of {sorted(RULES)}")
    out: dict[str, list[Check]] = {}
    for c in checks:
        item = next((it for key, it in RULES[page] if key in c.what), None)
        if item is None:
            raise ValueError(f"{page}: no item of document {DOC} for the check {c.what!r}; add a rule to RULES")
        out.setdefault(item, []).append(c)
    return out
