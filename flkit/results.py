"""Results store: one tidy table per experiment run, keyed by a hash of the run's configuration.

A run is described by a JSON-able ``config`` dict (dataset, partition, method, hyper-parameters, seed,
rounds, ...). Its metrics are a tidy table, one row per run x round x metric::

    round  metric     value   [run  seed  method  client  class ...]   <- optional extra columns
    0      test_acc   0.101
    0      train_loss 2.302
    ...

Per-class accuracies use a ``class`` column; method diagnostics (FedAU weights ``omega`` per ``client``,
the CVaR threshold ``t``) are simply more metrics. ``Store(root).save(config, table)`` writes

    <root>/<key>.csv    the table (no index, floats with ``float_format``, NaN as "nan", inf as "inf")
    <root>/<key>.json   the manifest: config, key, flkit version, git commit, device, platform (CPU
                        model, kernel path, library versions: ``flkit.numerics.platform``), wall time,
                        timestamp, row count, CSV checksum, ``diverged`` flag and round, extras

Both files are written to a temporary file in the same folder and moved into place with
``os.replace``, the manifest last; ``done(config)`` requires both files, the checksum and the row count
to agree, so a run killed half-way never counts as done and ``sweep`` simply recomputes it. Every
``save`` deletes the temporary files (``.<name>.<pid>.<hex>.tmp``, of any key, or of a ``flkit.fl.run``
checkpoint kept in the folder) not written for a minute: those of killed writers.

Row order (``canonical_order``): the rows are written sorted by ``round``, then ``metric``, then the
table's other columns except ``value`` (in the table's column order; a stable sort, so rows equal in all
of these keep their order). The file therefore depends on the set of rows, not on the order a job
emitted them in: a run resumed from a checkpoint stores the same bytes as an uninterrupted one.

Key policy (``config_key``): sha256 of the canonical JSON of the config (keys sorted, compact
separators, ASCII), first 16 hex digits. Dict order does not matter; tuples and lists are the same
(JSON has no tuples); numpy scalars count as the Python number they hold. Numbers follow Python's
``==``: an integral float is the same value as the int (``1 == 1.0`` gives one key, ``0.1`` and ``0.10``
too), but ``True`` is *not* ``1`` (JSON keeps booleans apart) and ``0.1 + 0.2`` is not ``0.3``.
NaN/inf, non-string dict keys, sets, arrays and other objects are rejected with an error that names the
offending field, before any work is done.

Sweeps (`sweep`, `sweep_batched`) run their jobs in this process, or, given ``executor=`` (any
``concurrent.futures.Executor``: a process pool, Dask's ``Client.get_executor()``, ... or an object whose
``submit`` returns handles with ``done()``/``result()``, such as submitit's ``AutoExecutor``), submit them
all and save each result here as it completes: the store is only ever written by the calling process.

Which stored runs a page used: every table this process reads from a store (``load``, ``load_many``,
``collect``, the sweeps) is noted, with whether it was computed in this process (``used_runs``);
``compute_summary`` says on what, and in how much compute time, they were computed (from their
manifests). ``python -m flkit.run`` has the kernel write that list to the file named by $FLKIT_READS_LOG
and records it in the executed page's metadata, which the reproduce appendix reads.

Results meant for the book are the small CSVs (and manifests) under ``results/<chapter>/``
(``book_store(chapter)``); scratch results go under ``results/tmp/`` (git-ignored).
"""
from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import io
import json
import math
import os
import secrets
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flkit import __version__, numerics

__all__ = [
    "Store",
    "book_store",
    "canonical_json",
    "canonical_order",
    "collect_frames",
    "config_key",
    "first_divergence",
    "flatten_config",
    "git_commit",
    "sweep",
    "sweep_batched",
    "used_runs",
    "compute_summary",
]

KEY_LENGTH = 16
REQUIRED_COLUMNS = ("round", "metric", "value")
RUN_KEY = "run_key"  # column that `collect` adds: the store key of the run a row belongs to
_TMP_SUFFIX = ".tmp"
_REPO = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------------------------------
# configs: validation, canonical form, key


def _to_json(value: Any, path: str, *, canonical: bool) -> Any:
    """Plain JSON value for `value` (dicts with str keys, lists, str, int, float, bool, None).

    canonical=True also turns integral floats into ints (the key policy: 1 == 1.0)."""
    where = path or "<config>"
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.generic):  # numpy scalar -> the Python scalar it holds
        value = value.item()
        if value is None or isinstance(value, (bool, str)):
            return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(
                f"config field {where!r} is {value!r}; NaN/inf are not JSON values. "
                "Use None or a string such as 'inf' instead."
            )
        if canonical and value.is_integer():
            return int(value)
        return float(value)
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(
                    f"config field {where!r} has the non-string key {k!r} ({type(k).__name__}); "
                    "JSON object keys must be strings."
                )
            out[k] = _to_json(v, f"{path}.{k}" if path else k, canonical=canonical)
        return out
    if isinstance(value, (list, tuple)):
        return [_to_json(v, f"{where}[{i}]", canonical=canonical) for i, v in enumerate(value)]
    hint = " Use .tolist()." if isinstance(value, np.ndarray) else ""
    raise TypeError(
        f"config field {where!r} is a {type(value).__name__} ({value!r:.60}), which is not JSON-able; "
        f"use str, int, float, bool, None, list/tuple or dict.{hint}"
    )


def _check_config(config: Mapping) -> None:
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict, got {type(config).__name__}")


def canonical_json(config: Mapping) -> str:
    """The canonical JSON text that `config_key` hashes (see the module docstring for the policy)."""
    _check_config(config)
    return json.dumps(
        _to_json(config, "", canonical=True), sort_keys=True, separators=(",", ":"),
        ensure_ascii=True, allow_nan=False,
    )


def config_key(config: Mapping) -> str:
    """Stable short key (16 hex digits of sha256 of `canonical_json(config)`)."""
    return hashlib.sha256(canonical_json(config).encode()).hexdigest()[:KEY_LENGTH]


def flatten_config(config: Mapping, prefix: str = "") -> dict[str, Any]:
    """Nested dicts flattened with dots ({"model": {"name": "cnn"}} -> {"model.name": "cnn"});
    lists become tuples so that the values can be grouped on."""
    out: dict[str, Any] = {}
    for k, v in config.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten_config(v, name + "."))
        elif isinstance(v, list):
            out[name] = _tuples(v)
        else:
            out[name] = v
    return out


def _tuples(v: Any) -> Any:
    return tuple(_tuples(x) for x in v) if isinstance(v, (list, tuple)) else v


# --------------------------------------------------------------------------------------------------
# tables


def first_divergence(table: pd.DataFrame, by: str | Sequence[str] | None = None, *,
                     x: str = "round", y: str = "value"):
    """Round at which `y` first becomes NaN or +-inf.

    by=None: one number for the whole table (None when every value is finite). by="seed" (or a list of
    columns): a Series indexed by group, NaN for groups that never diverged."""
    vals = pd.to_numeric(table[y], errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(vals)
    if by is None:
        if not bad.any():
            return None
        r = table.loc[bad, x].min()
        return r.item() if isinstance(r, np.generic) else r
    keys = [by] if isinstance(by, str) else list(by)
    rounds = table[x].where(bad)
    return rounds.groupby([table[k] for k in keys], sort=False).min()


def melt_wide(df: pd.DataFrame, ids) -> pd.DataFrame:
    """A wide table (one row per case, one column per measured number) as a tidy result table: every column not in
    `ids` becomes a metric (booleans as 0/1) at round 0 (or at the table's own round, when "round" is one of the
    `ids`); a missing id is written -1 (numbers) or "" (text), and missing values are dropped. :func:`pivot_wide`
    undoes it."""
    ids = list(ids)
    d = df.copy()
    for c in ids:
        d[c] = d[c].fillna(-1) if pd.api.types.is_numeric_dtype(d[c]) else d[c].fillna("")
    vals = [c for c in d.columns if c not in ids]
    for c in vals:
        d[c] = d[c].astype(float)
    t = d.melt(id_vars=ids, value_vars=vals, var_name="metric", value_name="value").dropna(subset=["value"])
    return (t if "round" in ids else t.assign(round=0)).reset_index(drop=True)


def pivot_wide(t: pd.DataFrame, ids) -> pd.DataFrame:
    """The wide table back from :func:`melt_wide` (one row per combination of `ids`, sorted)."""
    return t.pivot_table(index=list(ids), columns="metric", values="value", sort=True).reset_index().rename_axis(
        columns=None)


def _check_table(table: pd.DataFrame) -> pd.DataFrame:
    if not isinstance(table, pd.DataFrame):
        raise TypeError(f"a result table must be a pandas DataFrame, got {type(table).__name__}")
    missing = [c for c in REQUIRED_COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(
            f"result table lacks the columns {missing}; a tidy table has one row per run x round x "
            f"metric with columns {list(REQUIRED_COLUMNS)} (+ optional run/seed/method/client/class)"
        )
    if table.columns.duplicated().any():
        raise ValueError(f"result table has duplicated column names: {list(table.columns)}")
    if len(table) == 0:
        raise ValueError("result table is empty; a run must record at least one metric")
    table = table.reset_index(drop=True)
    try:
        value = pd.to_numeric(table["value"], errors="raise").astype(float)
    except (ValueError, TypeError) as e:
        raise ValueError(f"result table column 'value' must be numeric: {e}") from None
    rounds = pd.to_numeric(table["round"], errors="coerce")
    if rounds.isna().any() or not np.all(np.mod(rounds.to_numpy(dtype=float), 1) == 0):
        raise ValueError("result table column 'round' must hold integers (no missing values)")
    table = table.assign(round=rounds.astype("int64"), value=value)
    return table


def canonical_order(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of `table` in the store's order: by "round", "metric", then every other column but
    "value" in the table's column order (stable; missing values last; mixed-type columns compared as
    text). The index is reset."""
    keys = [c for c in ("round", "metric") if c in table.columns]
    keys += [c for c in table.columns if c not in keys and c != "value"]
    if not keys or len(table) < 2:
        return table.reset_index(drop=True)

    def key(col: pd.Series) -> pd.Series:  # mixed-type object columns: compare as text, missing last
        missing = lambda v: v is None or (isinstance(v, float) and math.isnan(v))  # noqa: E731
        return col.map(lambda v: None if missing(v) else str(v)) if col.dtype == object else col

    return table.sort_values(keys, kind="mergesort", key=key, na_position="last").reset_index(drop=True)


def _count_rows(data: bytes) -> int:
    if b'"' in data:  # quoted fields may hold newlines: let the CSV parser count
        return len(pd.read_csv(io.BytesIO(data), keep_default_na=False))
    lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    return max(lines - 1, 0)  # header


# --------------------------------------------------------------------------------------------------
# environment facts for the manifest


@functools.lru_cache(maxsize=8)
def git_commit(cwd: str | os.PathLike | None = None) -> str | None:
    """`git rev-parse HEAD` of the repository holding flkit (or `cwd`); None when there is no git,
    no repository or no commit yet."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=str(cwd or _REPO), capture_output=True, text=True,
            timeout=10, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    sha = out.stdout.strip()
    if out.returncode != 0 or len(sha) != 40 or any(c not in "0123456789abcdef" for c in sha):
        return None
    return sha


def _detected_device() -> str:
    torch = sys.modules.get("torch")  # never import torch just to write a manifest
    try:
        if torch is not None and torch.cuda.is_available():
            return f"cuda ({torch.cuda.get_device_name()})"
    except Exception:  # pragma: no cover - broken CUDA setups
        pass
    return "cpu"


def _flkit_version() -> str | None:
    return __version__


def _extra_json(value: Any, path: str) -> Any:
    """Manifest extras: like configs, but a NaN/inf diagnostic is kept as the string 'nan'/'inf'
    rather than failing a save after the work is done."""
    if isinstance(value, (float, np.floating)) and not math.isfinite(float(value)):
        return str(float(value))
    if isinstance(value, Mapping):
        return {str(k): _extra_json(v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_extra_json(v, f"{path}[{i}]") for i, v in enumerate(value)]
    return _to_json(value, path, canonical=False)


# --------------------------------------------------------------------------------------------------
# temporary files (the store's and flkit.fl.run's checkpoints)

STALE_S = 60.0  # seconds after its last write from which a temporary file counts as a killed writer's


def temp_path(path: Path) -> Path:
    """The temporary file a writer of `path` writes before `os.replace`: `.<name>.<pid>.<hex>.tmp` in the
    same folder (hidden, unique per writer, found by `remove_stale_temp`)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}{_TMP_SUFFIX}")


def remove_stale_temp(folder: Path, pattern: str, older_than_s: float = STALE_S) -> list[Path]:
    """Delete the files of `folder` matching the glob `pattern` not written for `older_than_s` seconds;
    returns them."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    now, removed = time.time(), []
    for p in folder.glob(pattern):
        try:
            if p.is_file() and now - p.stat().st_mtime >= older_than_s:
                p.unlink()
                removed.append(p)
        except OSError:
            pass
    return removed


# --------------------------------------------------------------------------------------------------
# the store


class Store:
    """A folder of results, one `<key>.csv` + `<key>.json` pair per run.

    float_format: how floats are written ("%.8g" keeps 8 significant digits, more than float32 holds;
    None writes Python's exact shortest repr)."""

    def __init__(self, root: str | os.PathLike, float_format: str | None = "%.8g"):
        self.root = Path(root)
        self.float_format = float_format

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    @property
    def name(self) -> str:
        """The folder for printing: relative to the repository when inside it (no local paths on pages)."""
        root = self.root.resolve()
        return str(root.relative_to(_REPO)) if root.is_relative_to(_REPO) else str(self.root)

    # ---- names
    key = staticmethod(config_key)

    def path(self, config: Mapping) -> Path:
        """The CSV file of `config`'s table."""
        return self.root / f"{config_key(config)}.csv"

    def manifest_path(self, config: Mapping) -> Path:
        return self.root / f"{config_key(config)}.json"

    # ---- state
    def _read_verified(self, key: str) -> tuple[dict, bytes] | None:
        """(manifest, csv bytes) when the pair for `key` is complete and consistent, else None."""
        try:
            manifest = json.loads((self.root / f"{key}.json").read_text())
            data = (self.root / f"{key}.csv").read_bytes()
        except (OSError, ValueError):
            return None
        if not isinstance(manifest, dict) or manifest.get("key") != key:
            return None
        if manifest.get("csv_sha256") != hashlib.sha256(data).hexdigest():
            return None
        if manifest.get("rows") != _count_rows(data):
            return None
        return manifest, data

    def done(self, config: Mapping) -> bool:
        """True only when both files exist and agree (checksum and row count)."""
        return self._read_verified(config_key(config)) is not None

    # ---- write
    def save(self, config: Mapping, table: pd.DataFrame, *, wall_time_s: float | None = None,
             device: str | None = None, **manifest_extra) -> Path:
        """Write `table` for `config` atomically (CSV first, manifest last); returns the CSV path.

        The table's index is dropped and its rows are put in `canonical_order`; 'round' is stored as
        int64 and 'value' as float64. NaN/inf values are kept (CSV "nan"/"inf") and mark the run as
        diverged in the manifest."""
        key = config_key(config)  # validates the config
        cfg = _to_json(config, "", canonical=False)
        table = canonical_order(_check_table(table))
        extra = {k: _extra_json(v, k) for k, v in manifest_extra.items()}
        data = table.to_csv(index=False, float_format=self.float_format, na_rep="nan",
                            lineterminator="\n").encode()
        div = first_divergence(table)
        div_metrics = []
        if div is not None:
            at = ~np.isfinite(table["value"].to_numpy()) & (table["round"] == div).to_numpy()
            div_metrics = sorted(table.loc[at, "metric"].astype(str).unique())
        manifest = {
            "key": key,
            "config": cfg,
            "flkit_version": _flkit_version(),
            "git_commit": git_commit(),
            "device": device or _detected_device(),
            "platform": numerics.platform(),   # CPU, kernel path, library versions (flkit.numerics)
            "wall_time_s": None if wall_time_s is None else round(float(wall_time_s), 3),
            "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "rows": len(table),
            "columns": {c: str(t) for c, t in table.dtypes.items()},
            "csv_sha256": hashlib.sha256(data).hexdigest(),
            "diverged": div is not None,
            "diverged_round": div,
            "diverged_metrics": div_metrics,
        }
        clash = sorted(set(extra) & set(manifest))
        if clash:
            raise ValueError(f"manifest extras {clash} would overwrite fields the store writes itself")
        manifest.update(extra)
        text = json.dumps(manifest, indent=1, allow_nan=False) + "\n"

        self.root.mkdir(parents=True, exist_ok=True)
        self.cleanup()  # every key's stale temp files (killed writers, fl.run checkpoints kept here)
        (self.root / f"{key}.json").unlink(missing_ok=True)  # an older result stops counting first
        self._atomic_write(self.root / f"{key}.csv", data)
        self._atomic_write(self.root / f"{key}.json", text.encode())
        _COMPUTED.add(f"{self.name}/{key}")
        return self.root / f"{key}.csv"

    def _atomic_write(self, path: Path, data: bytes) -> None:
        tmp = temp_path(path)
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    def cleanup(self, older_than_s: float = STALE_S, *, key: str | None = None) -> list[Path]:
        """Delete temporary files left by killed writers (only those older than `older_than_s`, so a
        writer in another process is not disturbed), of `key` or (None) of every key and every
        `flkit.fl.run` checkpoint kept in this folder; `save` calls it. Returns the deleted paths."""
        return remove_stale_temp(self.root, f".{key}.*{_TMP_SUFFIX}" if key else f".*{_TMP_SUFFIX}", older_than_s)

    def remove(self, config: Mapping) -> None:
        """Forget the result of `config` (manifest first)."""
        self.manifest_path(config).unlink(missing_ok=True)
        self.path(config).unlink(missing_ok=True)

    # ---- read
    def _parse(self, manifest: dict, data: bytes) -> pd.DataFrame:
        _note_use(self, manifest)
        df = pd.read_csv(io.BytesIO(data), keep_default_na=False, na_values=["nan"])
        for col, dtype in manifest.get("columns", {}).items():
            if col in df.columns and str(df[col].dtype) != dtype:
                try:  # e.g. floats written as "1" come back as int64
                    df[col] = df[col].astype(dtype)
                except (TypeError, ValueError):
                    pass
        return df

    def load(self, config: Mapping) -> pd.DataFrame:
        """The table saved for `config` (FileNotFoundError when there is no complete result)."""
        key = config_key(config)
        got = self._read_verified(key)
        if got is None:
            raise FileNotFoundError(f"no complete result in {self.root} for key {key} (config {dict(config)})")
        return self._parse(*got)

    def manifest(self, config: Mapping) -> dict:
        """The manifest of a complete result."""
        key = config_key(config)
        got = self._read_verified(key)
        if got is None:
            raise FileNotFoundError(f"no complete result in {self.root} for key {key}")
        return got[0]

    def manifests(self) -> list[dict]:
        """Manifests of all complete results, sorted by key."""
        out = []
        if not self.root.is_dir():
            return out
        for p in sorted(self.root.glob("*.json")):
            if p.name.startswith("."):
                continue
            got = self._read_verified(p.stem)
            if got is None:
                warnings.warn(f"skipping incomplete or inconsistent result {p.name} in {self.root}", stacklevel=3)
                continue
            out.append(got[0])
        return out

    def collect(self, where: Mapping | None = None, **filters) -> pd.DataFrame:
        """All stored tables, one frame, with the config fields joined as columns.

        Columns: `run_key`, the flattened config fields ("model.name"), then the table's columns (a
        config field whose name is also a table column is renamed "config.<name>"). Filters compare
        config fields by equality (same policy as the key: 1 == 1.0, tuple == list); a set means
        "one of", a callable is a predicate on the field's value; runs lacking the field are left out.
        Dotted names go through `where`: collect(where={"model.name": "cnn"}, method="fedau")."""
        flt = flatten_config({**(where or {}), **filters}, "") if (where or filters) else {}
        manifests = self.manifests()
        known = set().union(*(flatten_config(m["config"]).keys() for m in manifests)) if manifests else set()
        unknown = sorted(set(flt) - known)
        if unknown and manifests:
            raise KeyError(
                f"no stored config has the field(s) {unknown}; known fields: {sorted(known)}. "
                "Filter table columns (metric, round, ...) on the returned frame instead."
            )
        frames = []
        for m in manifests:
            flat = flatten_config(m["config"])
            if all(k in flat and _matches(flat[k], f) for k, f in flt.items()):
                frames.append(self._joined(m, flat))
        return collect_frames(frames)

    def load_many(self, configs: Iterable[Mapping]) -> pd.DataFrame:
        """Tables of `configs` (in order, duplicates once) with the config columns joined like `collect`."""
        frames, seen = [], set()
        for config in configs:
            key = config_key(config)
            if key in seen:
                continue
            seen.add(key)
            got = self._read_verified(key)
            if got is None:
                raise FileNotFoundError(f"no complete result in {self.root} for key {key} (config {dict(config)})")
            frames.append(self._joined(got[0], flatten_config(got[0]["config"]), got[1]))
        return collect_frames(frames)

    def _joined(self, manifest: dict, flat: dict, data: bytes | None = None) -> pd.DataFrame:
        if data is None:
            data = (self.root / f"{manifest['key']}.csv").read_bytes()
        table = self._parse(manifest, data)
        n = len(table)
        cols = {RUN_KEY: pd.Series([manifest["key"]] * n)}
        for name, v in flat.items():
            col = f"config.{name}" if name in table.columns else name
            cols[col] = pd.Series([v] * n, dtype=object if isinstance(v, tuple) or v is None else None)
        return pd.concat([pd.DataFrame(cols), table], axis=1)


def _eq_form(v: Any) -> str:
    return json.dumps(_to_json(v, "filter", canonical=True), sort_keys=True)


def _matches(value: Any, want: Any) -> bool:
    if callable(want):
        return bool(want(value))
    if isinstance(want, (set, frozenset)):
        return _eq_form(value) in {_eq_form(w) for w in want}
    return _eq_form(value) == _eq_form(want)


def collect_frames(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate joined tables (empty frame with the tidy columns when there are none)."""
    if not frames:
        return pd.DataFrame({RUN_KEY: pd.Series(dtype=str), "round": pd.Series(dtype="int64"),
                             "metric": pd.Series(dtype=str), "value": pd.Series(dtype=float)})
    return pd.concat(frames, ignore_index=True, sort=False)


# --------------------------------------------------------------------------------------------------
# which stored runs this process used

READS_LOG_ENV = "FLKIT_READS_LOG"   # a file to which each run used is appended, one line each (flkit.run)
_USED: dict[str, dict] = {}          # "<store name>/<key>" -> manifest, in the order of first use
_COMPUTED: set[str] = set()          # the runs of _USED saved by this process


def _note_use(store: Store, manifest: dict) -> None:
    name = f"{store.name}/{manifest.get('key')}"
    if name in _USED:
        return
    _USED[name] = manifest
    log = os.environ.get(READS_LOG_ENV)
    if log:
        try:
            with open(log, "a", encoding="utf-8") as f:
                f.write(f"{name}\t{'computed' if name in _COMPUTED else 'read'}\n")
        except OSError:   # the record is a convenience: a run never fails for it
            pass


def used_runs() -> pd.DataFrame:
    """The stored runs whose tables this process used so far, in the order of first use: `run` ("<store>/<key>",
    the store relative to the repository when inside it), `computed` (saved by this process, else read
    from the store), `device`, `compute_s` (the run's share of its batch's wall time) and `computed_on`
    (`computed_on(manifest["platform"])`)."""
    rows = [dict(run=name, computed=name in _COMPUTED, device=str(m.get("device")), compute_s=run_compute_s(m),
                 computed_on=computed_on(m.get("platform"))) for name, m in _USED.items()]
    return pd.DataFrame(rows, columns=["run", "computed", "device", "compute_s", "computed_on"])


def run_compute_s(manifest: Mapping) -> float:
    """The compute time of one stored run: its wall time, divided by the size of the batch it was trained in."""
    return float(manifest.get("wall_time_s") or 0.0) / int(manifest.get("batch_size") or 1)


def computed_on(platform: Mapping | None) -> str:
    """Where a run was computed, from its manifest's platform (flkit.numerics): the GPU, or the CPU model and
    ATen's kernel path; "not recorded" for runs stored before manifests recorded it."""
    if not platform:
        return "not recorded"
    if platform.get("gpu"):
        return str(platform["gpu"])
    path = str(platform.get("kernel_path", "")).split(",")[0]
    return f"{platform.get('cpu', 'CPU')}, {path} kernels" if path else str(platform.get("cpu", "CPU"))


def compute_summary(manifests: Iterable[Mapping]) -> dict:
    """What computed a set of stored runs: {"runs", "devices" (sorted), "compute_s" (sum of `run_compute_s`),
    "computed_on" (sorted, see `computed_on`)}. Device "cuda" with a GPU named in the platform reads
    "cuda (<GPU>)"."""
    runs, devices, seconds, where = 0, set(), 0.0, set()
    for m in manifests:
        runs += 1
        dev = str(m.get("device"))
        devices.add(dev.split(" (")[0])
        seconds += run_compute_s(m)
        where.add(computed_on(m.get("platform")))
    return dict(runs=runs, devices=sorted(devices), compute_s=seconds, computed_on=sorted(where))


def book_store(chapter: str, root: str | os.PathLike | None = None) -> Store:
    """The store whose small CSVs the book commits: <repo>/results/<chapter>/ ($FLKIT_RESULTS or
    `root` replaces <repo>/results)."""
    base = Path(root or os.environ.get("FLKIT_RESULTS") or _REPO / "results")
    return Store(base / chapter)


# --------------------------------------------------------------------------------------------------
# sweeps


def _pending(configs: Iterable[Mapping], store: Store) -> tuple[list[dict], list[dict]]:
    """(all unique configs in order, those without a complete result); validates every config first."""
    unique, seen = [], set()
    for config in configs:
        _check_config(config)
        key = config_key(config)  # raises on a bad field before any work is done
        if key not in seen:
            seen.add(key)
            unique.append(config)
    return unique, [c for c in unique if not store.done(c)]


def _progress(total: int, initial: int, progress: bool, desc: str | None):
    from tqdm import tqdm
    return tqdm(total=total, initial=initial, disable=not progress, desc=desc, unit="run")


_POLL_S = 1.0  # seconds between polls of job handles that are not concurrent.futures.Future (submitit)


def _check_executor(executor: Any) -> None:
    if executor is not None and not callable(getattr(executor, "submit", None)):
        raise TypeError(
            f"executor must be None or a concurrent.futures.Executor (anything with submit(fn, *args) "
            f"returning a handle with done() and result()), got {type(executor).__name__} ({executor!r:.60})"
        )


def _timed(fn: Callable, arg: Any, many: bool = False) -> tuple[Any, float, str]:
    """(fn(arg), wall seconds, device), measured where the job runs (a worker, under an executor).

    many=True lists fn's result inside the job (a generator of tables cannot travel back)."""
    t0 = time.perf_counter()
    out = list(fn(arg)) if many else fn(arg)
    return out, time.perf_counter() - t0, _detected_device()


def _completed(futures: Sequence, poll_s: float = _POLL_S) -> Iterable[int]:
    """Indices of `futures` in the order they complete (concurrent.futures.as_completed when they are
    Futures; otherwise, e.g. submitit Jobs, their done() is polled every `poll_s` seconds)."""
    if all(isinstance(f, concurrent.futures.Future) for f in futures):
        where = {f: i for i, f in enumerate(futures)}
        for f in concurrent.futures.as_completed(futures):
            yield where[f]
        return
    pending = list(range(len(futures)))
    while pending:
        ready = [i for i in pending if futures[i].done()]
        if not ready:
            time.sleep(poll_s)
        pending = [i for i in pending if i not in set(ready)]
        yield from ready


def _finished_ok(future: Any) -> bool:
    try:
        return bool(future.done()) and future.exception() is None
    except Exception:  # cancelled, or a handle that cannot tell
        return False


def _run_jobs(items: Sequence, job: Callable, many: bool, executor: Any,
              save: Callable[[Any, tuple], None]) -> None:
    """save(item, _timed(job, item)) for every item.

    executor None: one after the other in this process. Otherwise every item is submitted first, then
    each result is saved here as its job completes. On any error (a job's, a save's, or an interrupt of
    this process) the jobs not yet started are cancelled, those already finished are saved, and the
    error propagates; jobs still running are not waited for (their results are recomputed next time)."""
    if executor is None:
        for item in items:
            save(item, _timed(job, item, many))
        return
    futures: list = []
    handled: set[int] = set()
    try:
        for item in items:
            futures.append(executor.submit(_timed, job, item, many))
        for i in _completed(futures):
            handled.add(i)
            save(items[i], futures[i].result())
    except BaseException:
        for f in futures:
            try:
                if not f.done():
                    f.cancel()
            except Exception:  # e.g. scancel failed: the job's result is simply never saved
                pass
        for i, f in enumerate(futures):
            if i not in handled and _finished_ok(f):
                handled.add(i)
                try:
                    save(items[i], f.result())
                except Exception as e:  # keep the first error; report this one
                    warnings.warn(f"could not save a finished job while stopping the sweep: {e!r}", stacklevel=3)
        raise


def _report(desc: str | None, n: int, computed: int, progress: bool) -> None:
    """One line: how many runs came from the store and how many were computed."""
    if progress:
        print(f"{desc + ': ' if desc else ''}{n} runs: {n - computed} read from the results store, {computed} computed")


def sweep(configs: Iterable[Mapping], fn: Callable[[dict], pd.DataFrame], store: Store,
          progress: bool = True, desc: str | None = None, *, device: str | None = None,
          executor: concurrent.futures.Executor | None = None) -> pd.DataFrame:
    """Run `fn(config) -> table` for every config without a complete result, saving each as it ends.

    Interrupt and call again: finished runs are skipped. Returns the tables of all `configs` joined
    with their config columns (as `Store.load_many`).

    executor: None runs the configs one after the other in this process. An executor (e.g.
    `ProcessPoolExecutor`, Dask's `Client(...).get_executor()`, submitit's `AutoExecutor`) gets every
    pending `fn(config)` at once; each table is saved here, in the calling process, as its job
    completes, so a killed sweep keeps the finished runs and the stored tables do not depend on the
    completion order. `fn` must then be picklable (a module-level function). Wall time and device are
    measured inside the job; a table's ``attrs["wall_time_s"]``, where `fn` sets it (the wall time of every
    piece of a run resumed from a checkpoint), is recorded instead. A job's exception propagates after the
    results that had already finished are saved; jobs not yet started are cancelled."""
    _check_executor(executor)
    unique, todo = _pending(configs, store)
    with _progress(len(unique), len(unique) - len(todo), progress, desc) as bar:
        def save(config: dict, out: tuple) -> None:
            table, wall, where = out      # a job resumed from a checkpoint gives all its pieces' time in attrs
            store.save(config, table, wall_time_s=table.attrs.get("wall_time_s", wall), device=device or where)
            bar.update(1)

        _run_jobs(todo, fn, False, executor, save)
    _report(desc, len(unique), len(todo), progress)
    return store.load_many(unique)


def sweep_batched(configs: Iterable[Mapping], fn_many: Callable[[list[dict]], Sequence[pd.DataFrame]],
                  store: Store, batch_size: int | None = None, progress: bool = True,
                  desc: str | None = None, *, group_by: str | Sequence[str] | Callable | None = None,
                  device: str | None = None,
                  executor: concurrent.futures.Executor | None = None) -> pd.DataFrame:
    """Like `sweep`, but the missing configs go to `fn_many(list_of_configs) -> list of tables` in
    batches of at most `batch_size` (None: all at once), so that many runs share one vectorized
    computation. group_by (field name(s) or a function of the config) keeps only configs that agree on
    it in one batch (e.g. group_by="method" when only seeds and learning rates vectorize).
    Each run's manifest records the batch's wall time and size (`table.attrs["wall_time_s"]`, when
    fn_many sets it, wins: a batch resumed from a checkpoint counts its earlier pieces too) and the
    table's other attrs (e.g. how it was computed).

    executor: as in `sweep`, with one job per batch (`fn_many(batch)`); the batches are formed here,
    the same with or without an executor."""
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be a positive int or None, got {batch_size!r}")
    _check_executor(executor)
    unique, todo = _pending(configs, store)
    groups: dict[str, list[dict]] = {}
    for config in todo:
        if group_by is None:
            g = ""
        elif callable(group_by):
            g = _eq_form(group_by(config))
        else:
            names = [group_by] if isinstance(group_by, str) else list(group_by)
            flat = flatten_config(config)
            g = _eq_form([flat.get(n) for n in names])
        groups.setdefault(g, []).append(config)
    batches: list[list[dict]] = []
    for members in groups.values():
        size = batch_size or len(members)
        batches += [members[i:i + size] for i in range(0, len(members), size)]
    with _progress(len(unique), len(unique) - len(todo), progress, desc) as bar:
        def save(batch: list[dict], out: tuple) -> None:
            tables, wall, where = out
            if len(tables) != len(batch):
                raise ValueError(f"fn_many returned {len(tables)} tables for a batch of {len(batch)} configs")
            for config, table in zip(batch, tables):
                # a batch resumed from a checkpoint reports its total compute time in table.attrs
                extra = {k: v for k, v in table.attrs.items()
                         if k not in ("wall_time_s", "device", "batch_size")}
                store.save(config, table, wall_time_s=table.attrs.get("wall_time_s", wall),
                           device=device or where, batch_size=len(batch), **extra)
            bar.update(len(batch))

        _run_jobs(batches, fn_many, True, executor, save)
    _report(desc, len(unique), len(todo), progress)
    return store.load_many(unique)
