"""flkit.plots: smoothing, curves with diverged runs, the document-vs-ours table."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from flkit import plots  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# ---------------------------------------------------------------------------------------------- smoothing

@pytest.mark.parametrize("w", [0.0, 0.3, 0.6, 0.99])
def test_ema_of_constant_is_the_constant(w):
    np.testing.assert_array_equal(plots.smooth_ema(np.full(50, 0.7), w), np.full(50, 0.7))


def test_ema_debiased_values():
    # m_t = w m_{t-1} + (1-w) x_t, s_t = m_t / (1 - w^t), w = 0.5
    np.testing.assert_allclose(plots.smooth_ema([1.0, 2.0, 3.0], 0.5), [1.0, 1.25 / 0.75, 2.125 / 0.875])
    x = np.random.default_rng(0).normal(size=20)
    np.testing.assert_allclose(plots.smooth_ema(x, 0.0), x)
    # non-constant sequence through the general path still debiases the start exactly
    assert plots.smooth_ema([5.0, 1.0], 0.9)[0] == pytest.approx(5.0)


def test_ema_skips_non_finite_and_keeps_series_index():
    s = pd.Series([1.0, np.nan, 3.0, np.inf], index=[10, 20, 30, 40])
    out = plots.smooth_ema(s, 0.5)
    assert isinstance(out, pd.Series) and list(out.index) == [10, 20, 30, 40]
    assert out[10] == 1.0 and np.isnan(out[20]) and np.isinf(out[40])
    assert out[30] == pytest.approx((0.25 + 1.5) / 0.75)  # the NaN did not count as a step


@pytest.mark.parametrize("bad", [1.0, -0.1, True])
def test_ema_rejects_bad_weight(bad):
    with pytest.raises(ValueError):
        plots.smooth_ema([1.0, 2.0], bad)


def test_smooth_window():
    np.testing.assert_allclose(plots.smooth_window([1, 2, 3, 4], 2), [1, 1.5, 2.5, 3.5])
    np.testing.assert_allclose(plots.smooth_window([1, 2, 3, 4], 3), [1, 1.5, 2, 3])
    np.testing.assert_allclose(plots.smooth_window([1, 5, 2], 1), [1, 5, 2])
    np.testing.assert_array_equal(plots.smooth_window(np.full(7, 0.3), 4), np.full(7, 0.3))
    with pytest.raises(ValueError):
        plots.smooth_window([1, 2], 0)


# ---------------------------------------------------------------------------------------------- curves

def frame():
    rounds = np.arange(10)
    rows = []
    for seed in range(3):
        for r in rounds:
            rows.append({"method": "fedavg", "seed": seed, "round": r, "metric": "acc", "value": 0.1 * r + 0.01 * seed})
    for seed in range(2):
        for r in rounds:
            v = 0.05 * r
            if seed == 1 and r >= 6:
                v = np.nan if r > 6 else np.inf  # diverges at round 6
            rows.append({"method": "fedau", "seed": seed, "round": r, "metric": "acc", "value": v})
    return pd.DataFrame(rows)


def _legend(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def _line(ax, label):
    (line,) = [ln for ln in ax.get_lines() if ln.get_label() == label]
    return line


def test_curves_marks_diverged_run_and_excludes_it_from_the_mean():
    df = frame()
    ax = plots.curves(df, hue="method", band="sd")
    legend = _legend(ax)
    assert "fedavg" in legend
    assert any(t.startswith("fedau (diverged)") for t in legend)
    # the mean of fedavg is the mean over its three seeds
    want = df[df.method == "fedavg"].groupby("round")["value"].mean().to_numpy()
    np.testing.assert_allclose(_line(ax, "fedavg").get_ydata(), want)
    # fedau's curve is its finite seed only; the diverged seed is an 'x' at round 6
    fedau = [ln for ln in ax.get_lines() if ln.get_label().startswith("fedau") and ln.get_marker() != "x"]
    assert len(fedau) == 1 and "1 of 2" in fedau[0].get_label()
    np.testing.assert_allclose(fedau[0].get_ydata(), 0.05 * np.arange(10))
    (marker,) = [ln for ln in ax.get_lines() if ln.get_marker() == "x"]
    assert list(marker.get_xdata()) == [6]
    for ln in ax.get_lines():  # nothing non-finite is drawn as a number
        assert np.all(np.isfinite(np.asarray(ln.get_ydata(), dtype=float)))
    assert len(ax.collections) == 1  # one sd band (fedavg); a single finite run has none


def test_curves_all_runs_diverged_and_options():
    df = frame()
    df.loc[df.method == "fedau", "value"] = np.inf
    ax = plots.curves(df, band="minmax", log=True, smooth=0.5, label_map={"fedau": "FedAU"})
    assert "FedAU (diverged)" in _legend(ax)
    (marker,) = [ln for ln in ax.get_lines() if ln.get_marker() == "x"]
    assert list(marker.get_xdata()) == [0, 0]
    assert ax.get_yscale() == "log"
    fedavg = _line(ax, "fedavg").get_ydata()
    want = df[df.method == "fedavg"].groupby("round")["value"].mean().to_numpy()
    np.testing.assert_allclose(fedavg, plots.smooth_ema(want, 0.5))  # EMA is linear: smooth then mean
    ax2 = plots.curves(df, smooth=3, band=None)
    assert len(ax2.collections) == 0


def test_curves_single_curve_and_existing_axes():
    df = frame()
    fig, ax = plt.subplots()
    out = plots.curves(df[df.method == "fedavg"], hue=None, ax=ax)
    assert out is ax and len(ax.get_lines()) == 1 and ax.get_xlabel() == "round" and ax.get_ylabel() == "acc"


def test_curves_input_errors():
    df = frame()
    two = pd.concat([df, df.assign(metric="loss")])
    with pytest.raises(ValueError, match="metric"):
        plots.curves(two)
    plots.curves(two, metric="loss")
    with pytest.raises(ValueError, match="several rows"):
        plots.curves(df.drop(columns="seed"))
    with pytest.raises(KeyError):
        plots.curves(df, hue="algo")
    with pytest.raises(ValueError):
        plots.curves(df, band="ci")


# ---------------------------------------------------------------------------------------------- reference

def test_reference_table_difference():
    ours = pd.DataFrame({
        "method": ["fedavg"] * 3 + ["fedau"] * 3 + ["mifa"],
        "seed": [0, 1, 2] * 2 + [0],
        "value": [80.0, 82.0, 84.0, 70.0, 71.0, 75.0, 60.0],
    })
    ref = pd.DataFrame({"method": ["fedavg", "fedau", "fedvarp"], "value": [81.5, 72.0, 65.0],
                        "source": ["Table 2"] * 3})
    out = plots.reference_table(ours, ref)
    assert list(out["method"]) == ["fedavg", "fedau", "fedvarp"]
    assert {"document", "ours", "ours sd", "n", "difference", "source"} <= set(out.columns)
    np.testing.assert_allclose(out["document"], [81.5, 72.0, 65.0])
    np.testing.assert_allclose(out["ours"][:2], [82.0, 72.0])
    np.testing.assert_allclose(out["difference"][:2], [0.5, 0.0])  # ours - document
    np.testing.assert_allclose(out["ours sd"][:2], [2.0, np.std([70, 71, 75], ddof=1)])
    assert list(out["n"]) == [3, 3, 0] and np.isnan(out["ours"][2]) and np.isnan(out["difference"][2])
    assert "diverged runs" not in out.columns


def test_reference_table_diverged_and_multiple_keys():
    ours = pd.DataFrame({"method": ["a", "a", "b", "b"], "alpha": [0.1, 0.1, 0.1, 0.1],
                         "acc": [0.5, np.nan, 0.7, 0.9]})
    ref = pd.DataFrame({"method": ["a", "b"], "alpha": [0.1, 0.1], "acc": [0.6, 0.75]})
    out = plots.reference_table(ours, ref, value="acc", decimals=3)
    assert np.isnan(out.loc[0, "ours"]) and list(out["diverged runs"]) == [1, 0]
    assert out.loc[1, "difference"] == pytest.approx(0.05)
    with pytest.raises(ValueError, match="several rows"):
        plots.reference_table(ours, pd.concat([ref, ref]), value="acc")
    with pytest.raises(ValueError, match="numbers"):
        plots.reference_table(ours, ref.assign(acc=["~0.6", "0.75"]), value="acc")


def test_save_writes_figure_and_table(tmp_path):
    df = frame()
    ax = plots.curves(df)
    path = plots.save(ax.figure, tmp_path / "fig" / "curves.png", data=df, close=True)
    assert path.exists() and path.stat().st_size > 0
    back = pd.read_csv(tmp_path / "fig" / "curves.csv")
    assert len(back) == len(df)
