"""What the parameters of a page are and what each one takes, read from its source notebook and its chapter code
(for the checks and the `--list` of `python -m flkit.run`, which runs nothing that these refuse).

* `parameter_cell`, `declared_parameters`: the names, defaults and line comments of the notebook's one
  `parameters` cell;
* `profile_table`, `page_profiles`, `dict_setting`: the profiles of a page, from `PROFILES` in its chapter code;
* `value_problem`, `dict_problem`: why a value is refused for a parameter (None when it is accepted), from the
  parameter's name, its default and the page's profiles; `allowed`: what it accepts, in words;
* `check_values`: the range checks of the Fed-CVaR-Avg pages (`flkit.papers.cvar.settings`).
"""
from __future__ import annotations

import ast
import importlib
import re
import shlex
from collections.abc import Mapping
from pathlib import Path

import yaml

from flkit.papers import settings

__all__ = ["DEFAULT_PROFILES", "CVAR_EXPERIMENTS", "parameter_cell", "declared_parameters", "profile_table",
           "page_profiles", "dict_setting", "dict_problem", "value_problem", "allowed", "check_values"]

DEFAULT_PROFILES = ("paper", "reduced", "smoke")  # where the chapter code exposes no PROFILES for the page


def parameter_cell(source: Path) -> dict[str, tuple[object, str]]:
    """name -> (default, comment on its line) of the notebook's `parameters` cell; a ValueError unless the
    notebook has exactly one."""
    import nbformat
    import papermill

    nb = nbformat.read(source, as_version=4)
    tagged = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(tagged) != 1:
        raise ValueError(f"{source}: expected exactly one cell tagged 'parameters', found {len(tagged)}")
    return {name: (_literal(spec["default"]), spec.get("help") or "")
            for name, spec in papermill.inspect_notebook(str(source)).items()}


def declared_parameters(source: Path) -> dict:
    """The names and defaults of the notebook's `parameters` cell; error unless there is exactly one."""
    return {name: default for name, (default, _) in parameter_cell(source).items()}


def _literal(text: str):
    """A default as written in the parameters cell, evaluated when it is a plain literal."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


CVAR_EXPERIMENTS = {"mnist": "mnist", "fmnist_table": "fmnist", "synthetic_2d": "synthetic_2d"}  # page -> experiment


def profile_table(source: Path) -> dict[str, Mapping] | None:
    """{profile: its settings} of a page, from `PROFILES` in its chapter code: `flkit.papers.<chapter>.<page>`
    (keyed by profile) or `flkit.papers.<chapter>` (keyed by page, or by experiment for Fed-CVaR-Avg); None
    where neither exposes them."""
    source = Path(source)
    chapter, page = source.parent.name, source.stem
    key = CVAR_EXPERIMENTS.get(page, page) if chapter == "cvar" else page
    for name in (f"flkit.papers.{chapter}.{page}", f"flkit.papers.{chapter}"):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:       # no chapter code of that name; any other missing module is an error
            if e.name and (name == e.name or name.startswith(e.name + ".")):
                continue
            raise
        table = getattr(module, "PROFILES", None)
        if isinstance(table, Mapping) and "smoke" in table:
            return {k: v for k, v in table.items() if isinstance(v, Mapping)}
        if isinstance(table, Mapping) and isinstance(table.get(key), Mapping):
            return {k: v for k, v in table[key].items() if isinstance(v, Mapping)}
    return None


def page_profiles(source: Path) -> list[str]:
    """The profiles a page takes: the keys of its `profile_table`; where the chapter code exposes none, those
    of DEFAULT_PROFILES that the comment on the `profile` line names (`profile = "smoke"  # smoke: ...;
    paper: ...`), else all of DEFAULT_PROFILES."""
    table = profile_table(source)
    if table:
        return sorted(table)
    comment = parameter_cell(source).get("profile", (None, ""))[1]
    named = [p for p in DEFAULT_PROFILES if re.search(rf"\b{p}\b", comment)]
    return sorted(named if len(named) >= 2 else DEFAULT_PROFILES)


def dict_setting(source: Path, name: str, profile: str | None) -> Mapping | None:
    """The value of setting `name` in the page's profile `profile` (else its "paper" profile, else any) when
    that value is a dict, as MIFA's `rounds` (p -> rounds): such a parameter takes a dict, not a number.
    None when the page's profiles give `name` no dict value."""
    table = profile_table(source) or {}
    order = [profile, "paper", *sorted(table)]
    for prof in order:
        value = table.get(prof, {}).get(name) if prof in table else None
        if isinstance(value, Mapping):
            return value
    return None


def dict_problem(name: str, value, example: Mapping, profile: str, need_keys=None) -> str | None:
    """Why `value` is refused for a parameter that takes a dict like `example` (the profile's value), None when it
    is accepted: a dict whose keys are those of `need_keys` (every p of p_values) when given, each entry passing
    the rule for `name` (`flkit.papers.settings.RULES`)."""
    keys = ", ".join(_yaml(k) for k in (need_keys if need_keys is not None else example))
    hint = (f"{name} takes a dict with one entry per {_key_word(name)} ({keys}), e.g. "
            f"-p {name} {shlex.quote(_yaml(dict(example)))} (profile {profile}'s), or null (the profile's)")
    if not isinstance(value, Mapping) or not value:
        return hint
    if need_keys is not None:
        missing = [k for k in need_keys if k not in value]
        if missing:
            return f"{name} has no entry for {', '.join(_yaml(k) for k in missing)}: " + hint
    rule = settings.RULES.get(name)
    for k, v in value.items():
        try:
            if rule is not None:
                rule(v, f"{name}[{_yaml(k)}]")
            elif not isinstance(v, type(next(iter(example.values())))):
                raise ValueError(f"{name}[{_yaml(k)}] must be like {_yaml(next(iter(example.values())))}")
        except ValueError as e:
            return str(e)
    return None


def _key_word(name: str) -> str:
    return "participation probability p of p_values" if name == "rounds" else "key"


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _yaml(v) -> str:
    """A value as one would type it after -p."""
    return yaml.safe_dump(v, default_flow_style=True, width=1000).strip().removesuffix("\n...").strip()


def _kind_of(default) -> tuple[str, type | tuple]:
    """What a parameter takes when only its default tells: (words for it, the Python types accepted)."""
    if isinstance(default, bool):
        return "true or false", bool
    if isinstance(default, int):
        return f"an int, e.g. {default}", int
    if isinstance(default, float):
        return f"a number, e.g. {default}", (int, float)
    return f"{'a string' if isinstance(default, str) else 'a ' + type(default).__name__}, e.g. {_yaml(default)}", \
        type(default)


def value_problem(name: str, value, default, profiles: list[str]) -> str | None:
    """Why `value` is refused for parameter `name` (default `default`), None when it is accepted. What a
    parameter takes is read from its name first: `profile` one of the page's `profiles`; `seeds`, `*_seeds` a
    non-empty list of distinct ints >= 0; `seed`, `*_seed` an int >= 0; a name that `flkit.papers.settings`
    has a rule for (rounds, steps, mc_draws, subset, eta, beta, p_values, ...) that rule; `*_steps`,
    `*_rounds`, `*_draws`, `epochs` an int >= 1; `checkpoints` a list of ints >= 0. Otherwise from the
    default: the default's type (an int where the default is a float is accepted), anything where it is None.
    null (None) is accepted exactly where the default is None: "the profile's value"."""
    or_null = ", or null (the profile's)" if default is None else ""
    if value is None:
        return None if default is None else f"{name} has no null form here; the default is {_yaml(default)}"
    if name == "profile":
        return None if value in profiles else \
            f"profile must be one of {', '.join(profiles)} (the profiles of this page)"
    if name == "device":
        ok = isinstance(value, str) and re.fullmatch(r"auto|cpu|cuda(:\d+)?", value)
        return None if ok else "device must be auto, cpu, cuda or cuda:<index>"
    if name == "seeds" or name.endswith("_seeds"):
        ok = (isinstance(value, list) and value and all(_is_int(s) and s >= 0 for s in value)
              and len(set(value)) == len(value))
        return None if ok else f"{name} must be a list of distinct ints >= 0, e.g. [0, 1, 2]{or_null}"
    if name == "seed" or name.endswith("_seed"):
        return None if _is_int(value) and value >= 0 else f"{name} must be an int >= 0, e.g. 0{or_null}"
    if name in settings.RULES:
        try:
            settings.RULES[name](value, name)
        except ValueError as e:
            return f"{e}{or_null}"
        return None
    if name == "epochs" or name.endswith(("_steps", "_rounds", "_draws")):
        return None if _is_int(value) and value >= 1 else f"{name} must be an int >= 1, e.g. 10{or_null}"
    if name == "checkpoints":
        ok = isinstance(value, list) and value and all(_is_int(s) and s >= 0 for s in value)
        return None if ok else f"{name} must be a list of ints >= 0, e.g. [0, 50, 100]{or_null}"
    if default is None:
        return None
    words, types = _kind_of(default)
    ok = isinstance(value, types) and (isinstance(default, bool) or not isinstance(value, bool))
    return None if ok else f"{name} must be {words}"


def allowed(source: Path, name: str, default, profiles: list[str]) -> str:
    """What parameter `name` of `source` accepts, in words (the rules of `value_problem` and `dict_problem`)."""
    or_null = ", or null (the profile's)" if default is None else ""
    example = dict_setting(source, name, "paper")
    if example is not None:
        return f"a dict like {_yaml(dict(example))} (profile paper's){or_null}"
    if name == "profile":
        return f"one of {', '.join(profiles)}"
    if name == "device":
        return "auto, cpu, cuda or cuda:<index>"
    if name == "seeds" or name.endswith("_seeds"):
        return f"a list of distinct ints >= 0{or_null}"
    if name == "seed" or name.endswith("_seed"):
        return f"an int >= 0{or_null}"
    if name in settings.RULES:
        try:
            settings.RULES[name](-1, name)
            words = "see the notebook"
        except ValueError as e:       # the rule's own words for what it allows: "<name> must be ..., got -1"
            m = re.search(rf"{re.escape(name)} must (?:be )?(.*?), got", str(e))
            words = m[1] if m else "see the notebook"
            if words.startswith("lie in "):
                words = f"a number in {words[7:]} (or a list of them)"
        return f"{words}{or_null}"
    if name == "epochs" or name.endswith(("_steps", "_rounds", "_draws")):
        return f"an int >= 1{or_null}"
    if name == "checkpoints":
        return f"a list of ints >= 0{or_null}"
    if default is None:
        return "any value (see the comment), or null (the profile's)"
    return _kind_of(default)[0]


def check_values(source: Path, parameters: dict) -> None:
    """Range checks before any cell runs, where a chapter has them: the Fed-CVaR-Avg pages pass their
    profile, seeds and rounds through `flkit.papers.cvar.settings` (a ValueError for rounds <= 0, an
    empty seed list, an unknown profile, ...). Other pages check their values in their first cells."""
    source = Path(source)
    if source.parent.name != "cvar" or source.stem not in CVAR_EXPERIMENTS:
        return
    # Here, not at the top: only the Fed-CVaR-Avg pages need it, and importing the chapter loads torch and its
    # training code, which no other use of flkit.params or flkit.run (checking a page's parameters) needs.
    from flkit.papers import cvar
    cvar.settings(CVAR_EXPERIMENTS[source.stem], parameters.get("profile", "smoke"),
                  seeds=parameters.get("seeds"), rounds=parameters.get("rounds"))
