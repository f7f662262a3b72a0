"""flkit.display: numbers and tables as a reader sees them."""
import math

import numpy as np
import pandas as pd
import pytest

from flkit import display


@pytest.mark.parametrize("x, kw, text", [
    (1.518325e-29, {}, "1.52 × 10⁻²⁹"), (1.518325e-29, {"digits": 2}, "1.5 × 10⁻²⁹"),
    (math.inf, {}, "∞"), (-math.inf, {}, "−∞"), (math.inf, {"inf": "never reached"}, "never reached"),
    (float("nan"), {}, "n/a"), (None, {}, "n/a"), (np.nan, {"na": "-"}, "-"),
    (0.123456, {}, "0.123"), (2745.0, {}, "2745"), (1.4142, {}, "1.41"),
    (-0.5, {}, "−0.5"), (0.0, {}, "0"), (12345, {}, "12,345"), (np.int64(7), {}, "7"), (True, {}, "yes"),
    (np.bool_(False), {}, "no"), (9.996e-5, {}, "1 × 10⁻⁴"), (2.5e7, {}, "2.5 × 10⁷"), (3_000_000, {}, "3 × 10⁶"),
    ("text", {}, "text"),
])
def test_number(x, kw, text):
    assert display.number(x, **kw) == text


def test_number_keeps_the_value_to_its_digits():
    for x in (1.518325e-29, 4.131131e-01, 2.272034e-17, 1084.0, 0.002):
        assert float(display.number(x, digits=6).replace("−", "-").replace(" × 10", "e")
                     .translate(str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-"))) == pytest.approx(x, rel=1e-5)


@pytest.mark.parametrize("name, text", [
    ("rare_class", "rare class"), ("fed_cvar_avg", "fed CVaR avg"), ("mean_z2_iid_se", "mean z2 iid s.e."),
    ("gpu_minutes", "GPU minutes"), ("value", "value"), ("ours (± se)", "ours (± se)"), ("p", "p"),
    ("fedavg", "FedAvg"), ("max_abs_exact_minus_", "max abs exact minus"), (3, "3"), (None, ""),
])
def test_words(name, text):
    assert display.words(name) == text


def test_table_formats_every_number_and_names_every_header():
    df = pd.DataFrame({"method": ["fedavg", "mifa"], "final_gap": [4.131131e-01, 1.518325e-29],
                       "hit_round": [math.inf, 2745.0], "runs": [10, 10], "diverged": [False, True],
                       "note": ["a", None]}).set_index("method")
    out = display.table(df, columns={"hit_round": {"inf": "never reached"}}, names={"runs": "runs (seeds)"})
    assert list(out.columns) == ["final gap", "hit round", "runs (seeds)", "diverged", "note"]
    assert out.index.name == "method" and list(out.index) == ["fedavg", "mifa"]     # labels are data: kept
    assert out.to_dict("list") == {"final gap": ["0.413", "1.52 × 10⁻²⁹"], "hit round": ["never reached", "2745"],
                                   "runs (seeds)": ["10", "10"], "diverged": ["no", "yes"], "note": ["a", "n/a"]}
    assert df["final_gap"].iloc[1] == 1.518325e-29          # the frame itself is not changed
    html = out.to_html()
    assert "inf" not in html and "e-29" not in html and "final_gap" not in html


def test_table_multiindex_columns():
    df = pd.DataFrame([[1.0, 2.0]], columns=pd.MultiIndex.from_tuples([("test_acc", "mean"), ("test_acc", "sd")],
                                                                       names=["metric_name", None]))
    out = display.table(df)
    assert list(out.columns) == [("test acc", "mean"), ("test acc", "s.d.")]
    assert out.columns.names == ["metric name", None]


def test_table_refuses_what_is_not_a_frame():
    with pytest.raises(TypeError, match="takes a pandas DataFrame"):
        display.table([1, 2])


def test_execution_note_separates_reading_from_computing(tmp_path, monkeypatch):
    from flkit import results
    monkeypatch.setattr(results, "_USED", {})
    monkeypatch.setattr(results, "_COMPUTED", set())
    assert display.execution_note(9.2) == "This execution took 9 s; it used no stored run."
    store = results.Store(tmp_path / "s")
    t = pd.DataFrame({"round": [0], "metric": ["m"], "value": [1.0]})
    for k in range(3):
        store.save({"k": k}, t, wall_time_s=660.0, device="cuda", batch_size=3)
    monkeypatch.setattr(results, "_COMPUTED", set())          # as if stored by an earlier execution
    for k in range(3):
        store.load({"k": k})
    store.save({"k": 9}, t, wall_time_s=30.0, device="cpu")
    store.load({"k": 9})
    where = results.computed_on(store.manifest({"k": 0})["platform"])
    assert display.execution_note(95) == (f"This execution took 1.6 min; it read 3 stored runs, computed earlier: "
                                          f"3 on cuda ({where}) in 11.0 min; it computed 1 run now: 1 on cpu "
                                          f"({where}) in 30 s.")
