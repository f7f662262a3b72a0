"""The pieces of a GPU window (``scripts/gpu_window.sh``): what a lent GPU machine runs in one command, and how
its output comes back and is committed.

A window is one device command, ``bash scripts/gpu_window.sh --minutes 9.5`` (the device tool runs a command
for at most 10 minutes and brings back at most 8 files of 16 MiB each, 64 MiB together, from ``$OUT``): set-up
from the carried folder ``.device/``, about a minute of parity and throughput checks of the CNNs still to run at
a document's scale (their CSVs under ``results/benchmarks/window_*_<gpu>.csv``), then ``python -m flkit.owed
--pay`` for the time left, and at the end :func:`pack`: every file of the results root that the window created
or changed, as ``results.tar.gz`` (split into parts of :data:`PART_BYTES` when larger), a manifest
``window-manifest.txt`` (what is inside, with sizes and SHA-256, the files deleted, the files left behind, the
checks' and the pay's exit statuses) and the log ``window.log``. Here, :func:`unpack` (``python -m flkit.window
unpack <folder>``) checks the parts against the manifest, refuses any path outside ``results/`` before writing
anything, writes the files to their places and deletes the files the window deleted (finished runs'
checkpoints), listing what changed.

Subcommands (``python -m flkit.window ...``): ``check`` (the window's arguments; one line and exit status 2 on
bad input), ``tag`` (the GPU's short name: h100, h200, ...; cpu), ``hics-rate`` (the HiCS-FL Fashion-MNIST
CNN's client training and evaluation on a device, through the code path of its sweep), ``snapshot``, ``pack``,
``unpack``, ``size`` (what a device call would carry from this checkout, against its 64 MiB), ``prepare``
(a lean ``.device``: the data sets and an ``env.sh``, without the notebook recipe's wheels).
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import os
import re
import sys
import tarfile
import time
from pathlib import Path, PurePosixPath

_REPO = Path(__file__).resolve().parents[1]

__all__ = ["MAX_FILES", "FILE_CAP", "TOTAL_CAP", "PART_BYTES", "LOG_CAP", "MIN_MINUTES", "MAX_MINUTES", "ARCHIVE",
           "MANIFEST", "LOG", "results_root", "snapshot", "changes", "pack", "unpack", "gpu_tag", "hics_rate", "main"]

MAX_FILES = 8                   # files brought back from $OUT by the device tool
FILE_CAP = 16 * 2**20           # the most one of them may weigh (flkit.owed.FILE_CAP)
TOTAL_CAP = 64 * 2**20          # the most they may weigh together
PART_BYTES = 15 * 2**20         # one part of the archive (under FILE_CAP)
LOG_CAP = 2**20                 # the log brought back: its last MiB
MANIFEST_RESERVE = 2**20        # room kept for the manifest
SLACK = 2**20                   # what gzip and zlib may hold back unwritten, and tar's closing blocks
MIN_MINUTES, MAX_MINUTES = 4.0, 10.0   # a window's minutes: checks + one piece; one device command (10 min)
ARCHIVE, MANIFEST, LOG = "results.tar.gz", "window-manifest.txt", "window.log"
PREFIX = "results"              # the archive's top folder: results/<path under the results root>


class BadInput(ValueError):
    """Bad input, reported as one line before any work (exit status 2)."""


def results_root(root=None) -> Path:
    """``root``, else ``$FLKIT_RESULTS``, else ``<repo>/results`` (as :func:`flkit.results.book_store`)."""
    return Path(root or os.environ.get("FLKIT_RESULTS") or _REPO / "results")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(2**20), b""):
            h.update(block)
    return h.hexdigest()


def _skipped(rel: PurePosixPath) -> bool:
    """Scratch (``tmp/``, git-ignored) and writers' temporary files (``*.tmp``): never packed."""
    return rel.parts[:1] == ("tmp",) or rel.name.endswith(".tmp") or "__pycache__" in rel.parts


def snapshot(root) -> dict[str, list]:
    """{path under root (posix): [size, sha256]} of every file under ``root`` except scratch."""
    root = Path(root)
    out = {}
    if root.is_dir():
        for p in sorted(root.rglob("*")):
            rel = PurePosixPath(p.relative_to(root).as_posix())
            if p.is_file() and not p.is_symlink() and not _skipped(rel):
                out[str(rel)] = [p.stat().st_size, _file_sha256(p)]
    return out


def changes(before: dict, after: dict) -> tuple[list[str], list[str], list[str]]:
    """(new, changed, deleted) paths between two snapshots."""
    new = sorted(k for k in after if k not in before)
    changed = sorted(k for k in after if k in before and before[k][1] != after[k][1])
    deleted = sorted(k for k in before if k not in after)
    return new, changed, deleted


def _group(rel: str) -> str:
    """Files written in parts (``<name>.partNN``, flkit.fl checkpoints) travel together or not at all."""
    return re.sub(r"\.part\d+$", "", rel)


def _order(paths: list[str], sizes: dict[str, int]) -> list[list[str]]:
    """Groups of files in the order they are packed: stored runs and benchmarks (small, the results) before
    checkpoints (large, only progress), smallest first within each."""
    groups: dict[str, list[str]] = {}
    for p in paths:
        groups.setdefault(_group(p), []).append(p)
    ckpt = lambda g: "checkpoints" in PurePosixPath(g).parts  # noqa: E731
    return [sorted(groups[g]) for g in sorted(groups, key=lambda g: (ckpt(g), sum(sizes[p] for p in groups[g]), g))]


def _cap_log(src: Path | None, dst: Path, extra: list[str]) -> None:
    """The log's last LOG_CAP bytes (a first line says when it was cut), with ``extra`` lines appended."""
    data = src.read_bytes() if src is not None and src.is_file() else b""
    data += "".join(line + "\n" for line in extra).encode()
    if len(data) > LOG_CAP:
        head = f"[log cut: its first {len(data) - LOG_CAP + 200} bytes are left out]\n".encode()
        data = head + data[-(LOG_CAP - 200):]
    dst.write_bytes(data)


def pack(root, before: dict, out, *, log=None, notes: list[str] = (), part_bytes: int = PART_BYTES,
         max_parts: int | None = None, say=print) -> int:
    """Pack what changed under ``root`` since ``before`` (a :func:`snapshot`) into ``out``: ``results.tar.gz``
    (or ``results.tar.gz.partNN`` pieces of ``part_bytes``), ``window-manifest.txt`` and ``window.log`` (the
    file ``log``, its last MiB, with this function's lines added). Files go in by :func:`_order` while the
    archive stays within ``max_parts`` parts (default: what :data:`MAX_FILES` and :data:`TOTAL_CAP` leave after
    the manifest and the log); the others are listed as left behind. Returns 0, or 1 when a file was left."""
    root, out = Path(root), Path(out)
    if part_bytes <= 0 or part_bytes > FILE_CAP:
        raise BadInput(f"part_bytes must lie in (0, {FILE_CAP}], got {part_bytes}")
    if max_parts is None:
        max_parts = min(MAX_FILES - 2, (TOTAL_CAP - LOG_CAP - MANIFEST_RESERVE) // part_bytes)
    out.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []

    def tell(text: str) -> None:
        lines.append(text)
        say(text, flush=True)

    after = snapshot(root)
    new, changed, deleted = changes(before, after)
    status = {p: "new" for p in new} | {p: "changed" for p in changed}
    sizes = {p: after[p][0] for p in status}
    budget = max_parts * part_bytes
    tmp = out / (ARCHIVE + ".tmp")
    packed, left = [], []
    with open(tmp, "wb") as raw:
        with tarfile.open(fileobj=raw, mode="w:gz", compresslevel=6) as tar:
            for group in _order(list(status), sizes):
                try:                                      # what is there now (a writer may have moved on)
                    datas = {p: (root / p).read_bytes() for p in group}
                except OSError as e:
                    left += [(p, f"unreadable: {e.strerror or e}") for p in group]
                    continue
                # an upper bound of what the group adds: deflate grows incompressible data by 5 bytes a stored
                # block of <= 64 KiB, tar adds a 512-byte header and padding per file, gzip buffers < 64 KiB
                bound = sum(len(d) + len(d) // 2048 + 1024 for d in datas.values()) + 2**16
                if raw.tell() + bound > budget - SLACK:
                    left += [(p, "over the bytes a window brings back") for p in group]
                    continue
                for p, data in datas.items():
                    sizes[p], after[p] = len(data), [len(data), _sha256(data)]
                    info = tarfile.TarInfo(f"{PREFIX}/{p}")
                    info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
                    tar.addfile(info, io.BytesIO(data))
                    packed.append(p)
    size = tmp.stat().st_size
    parts = []
    if not packed:
        tmp.unlink()
    elif size <= part_bytes:
        tmp.replace(out / ARCHIVE)
        parts = [(ARCHIVE, size)]
    else:
        with open(tmp, "rb") as f:
            for i in range(math.ceil(size / part_bytes)):
                name = f"{ARCHIVE}.part{i:02d}"
                chunk = f.read(part_bytes)
                (out / name).write_bytes(chunk)
                parts.append((name, len(chunk)))
        tmp.unlink()
    digest = _file_sha256_parts(out, [n for n, _ in parts]) if parts else ""
    man = ["# flkit GPU window: what came back; here: python -m flkit.window unpack <this folder>",
           f"written\t{time.strftime('%Y-%m-%dT%H:%M:%S%z')}"]
    man += [f"note\t{n}" for n in notes]
    if parts:
        man.append(f"archive\t{ARCHIVE}\t{len(parts)}\t{size}\t{digest}")
        man += [f"part\t{n}\t{b}" for n, b in parts]
    man += [f"file\t{status[p]}\t{PREFIX}/{p}\t{after[p][0]}\t{after[p][1]}" for p in packed]
    man += [f"deleted\t{PREFIX}/{p}" for p in deleted]
    man += [f"left\t{PREFIX}/{p}\t{sizes[p]}\t{why}" for p, why in left]
    (out / MANIFEST).write_text("\n".join(man) + "\n")
    tell(f"packed {len(packed)} files ({len([p for p in packed if status[p] == 'new'])} new) into "
         + (f"{len(parts)} part(s) of {ARCHIVE}, {size / 2**20:.2f} MiB" if parts else "no archive")
         + f"; {len(deleted)} deleted; {len(left)} left behind")
    for p in packed:
        tell(f"  {status[p]:<7} {PREFIX}/{p}  {sizes[p] / 2**10:.1f} KiB")
    for p in deleted:
        tell(f"  deleted {PREFIX}/{p}")
    for p, why in left:
        tell(f"  LEFT BEHIND ({why}): {PREFIX}/{p}  {sizes[p] / 2**20:.1f} MiB")
    _cap_log(Path(log) if log else None, out / LOG, lines)
    files = sorted(out.iterdir())
    if (len(files) > MAX_FILES or any(f.stat().st_size > FILE_CAP for f in files)
            or sum(f.stat().st_size for f in files) > TOTAL_CAP):
        raise RuntimeError(f"{out}: over the device's limits ({len(files)} files)")   # pragma: no cover
    return 1 if left else 0


def _file_sha256_parts(folder: Path, names: list[str]) -> str:
    h = hashlib.sha256()
    for n in names:
        h.update((folder / n).read_bytes())
    return h.hexdigest()


# ------------------------------------------------------------------------------------------------ unpack
def _inside(name: str) -> str:
    """The path under the results root of an archive or manifest name ``results/<path>``; BadInput for
    anything else (absolute, ``..``, outside results/, empty)."""
    parts = name.split("/")
    if (len(parts) < 2 or parts[0] != PREFIX or "\\" in name
            or any(part in ("..", ".", "") for part in parts)):
        raise BadInput(f"refused: {name!r} is not a path inside {PREFIX}/")
    return "/".join(parts[1:])


def _read_manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    if not path.is_file():
        raise BadInput(f"{folder}: no {MANIFEST} (not a window's output?)")
    m = dict(archive=None, parts=[], files={}, deleted=[], left=[], notes=[])
    for line in path.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        f = line.split("\t")
        kind = f[0]
        try:
            if kind == "archive":
                m["archive"] = dict(name=f[1], parts=int(f[2]), bytes=int(f[3]), sha256=f[4])
            elif kind == "part":
                m["parts"].append((f[1], int(f[2])))
            elif kind == "file":
                m["files"][_inside(f[2])] = dict(status=f[1], size=int(f[3]), sha256=f[4])
            elif kind == "deleted":
                m["deleted"].append(_inside(f[1]))
            elif kind == "left":
                m["left"].append(line)
            elif kind == "note":
                m["notes"].append("\t".join(f[1:]))
        except (IndexError, ValueError) as e:
            if isinstance(e, BadInput):
                raise
            raise BadInput(f"{path}: malformed line {line[:80]!r}") from None
    return m


def unpack(folder, root=None, *, dry_run: bool = False, say=print) -> dict[str, list[str]]:
    """Restore a window's output (``folder``: where its files came back) into the results root: every check
    first (the parts' sizes and the archive's SHA-256 against the manifest; every member a regular file at
    ``results/<path>`` listed in the manifest with its SHA-256; no path outside ``results/``), nothing written
    when one fails (BadInput); then the files written (each through a temporary file) and the deleted ones
    removed. Returns {"new": [...], "changed": [...], "unchanged": [...], "deleted": [...]} (paths as
    ``results/<path>``)."""
    folder, root = Path(folder), results_root(root)
    m = _read_manifest(folder)
    members: dict[str, bytes] = {}
    if m["archive"] is not None:
        names = [n for n, _ in m["parts"]]
        if len(names) != m["archive"]["parts"] or not names:
            raise BadInput(f"{MANIFEST}: the archive has {m['archive']['parts']} parts, {len(names)} listed")
        blob = bytearray()
        for n, size in m["parts"]:
            if PurePosixPath(n).name != n or not (folder / n).is_file():
                raise BadInput(f"{folder}: part {n!r} is missing")
            data = (folder / n).read_bytes()
            if len(data) != size:
                raise BadInput(f"{folder / n}: {len(data)} bytes, the manifest says {size}")
            blob += data
        if _sha256(bytes(blob)) != m["archive"]["sha256"]:
            raise BadInput(f"{folder}: the archive's SHA-256 does not match the manifest (a part damaged?)")
        try:
            with tarfile.open(fileobj=io.BytesIO(bytes(blob)), mode="r:gz") as tar:
                for info in tar.getmembers():
                    rel = _inside(info.name)
                    if not info.isreg():
                        raise BadInput(f"refused: {info.name!r} is not a regular file")
                    if rel in members:
                        raise BadInput(f"refused: {info.name!r} appears twice")
                    members[rel] = tar.extractfile(info).read()
        except tarfile.TarError as e:
            raise BadInput(f"{folder}: the archive cannot be read ({e})") from None
    elif m["files"]:
        raise BadInput(f"{MANIFEST} lists files but no archive")
    if set(members) != set(m["files"]):
        extra = sorted(set(members) ^ set(m["files"]))
        raise BadInput(f"the archive and {MANIFEST} disagree on {len(extra)} file(s), e.g. {PREFIX}/{extra[0]}")
    for rel, data in members.items():
        if _sha256(data) != m["files"][rel]["sha256"]:
            raise BadInput(f"{PREFIX}/{rel}: SHA-256 differs from the manifest's")
    real_root = Path(os.path.realpath(root))
    for rel in list(members) + m["deleted"]:                 # no write may leave the root through a link
        target = Path(os.path.realpath(root / rel))
        if real_root != target and real_root not in target.parents:
            raise BadInput(f"refused: {PREFIX}/{rel} resolves outside {root}")
    report = {"new": [], "changed": [], "unchanged": [], "deleted": []}
    for rel, data in sorted(members.items()):
        target = root / rel
        kind = "new" if not target.exists() else "unchanged" if target.read_bytes() == data else "changed"
        report[kind].append(f"{PREFIX}/{rel}")
        if kind != "unchanged" and not dry_run:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.{os.getpid()}.unpack.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, target)
    for rel in m["deleted"]:
        if (root / rel).is_file():
            report["deleted"].append(f"{PREFIX}/{rel}")
            if not dry_run:
                (root / rel).unlink()
    for note in m["notes"]:
        say(f"window: {note}")
    for line in m["left"]:
        say("left behind on the machine: " + line.split("\t")[1])
    for kind in ("new", "changed", "deleted"):
        for p in report[kind]:
            say(f"{kind:<8} {p}")
    say(f"{'would restore' if dry_run else 'restored'} into {root}: {len(report['new'])} new, "
        f"{len(report['changed'])} changed, {len(report['unchanged'])} unchanged, {len(report['deleted'])} deleted")
    touched = report["new"] + report["changed"] + report["deleted"]
    if touched and root.resolve() == (_REPO / "results").resolve():
        dirs = sorted({str(PurePosixPath(p).parent) for p in touched})
        say("to commit: git add -A -- " + " ".join(dirs))
    return report


# ------------------------------------------------------------------------------------------------ checks
def gpu_tag(device: str = "cuda") -> str:
    """The device's short name for file names: "h100", "h200", "a100", ... from the CUDA device name; "cpu"."""
    import torch
    if device == "cpu":
        return "cpu"
    name = torch.cuda.get_device_name(torch.device(device))
    hit = re.search(r"\b([A-Z]{1,2}\d{2,4})\b", name)
    return hit.group(1).lower() if hit else re.sub(r"[^a-z0-9]+", "", name.lower())[:16] or "gpu"


def _synthetic_fmnist(n_train: int, n_test: int, device):
    """Random images and labels of Fashion-MNIST's shapes (1x28x28 in [0, 1], 10 classes): the rate of a
    client's training depends on the shapes and the sizes, not on the pixels."""
    import torch
    from flkit.datasets import Dataset
    g = torch.Generator().manual_seed(0)
    x, x_t = torch.rand(n_train, 1, 28, 28, generator=g), torch.rand(n_test, 1, 28, 28, generator=g)
    y, y_t = torch.randint(0, 10, (n_train,), generator=g), torch.randint(0, 10, (n_test,), generator=g)
    return Dataset("fashion-mnist", x, y, x_t, y_t, [str(c) for c in range(10)]).to(device)


def hics_rate(device: str = "cuda", rounds: int = 3, synthetic: int | None = None) -> list[dict]:
    """The HiCS-FL Fashion-MNIST CNN (the ``paper`` profile: ``hics_fmnist_paper``, SGD, 2 epochs of batch 64; a
    round's clients together on a GPU, one at a time on a CPU: ``experiments.batch_clients``) on ``device`` through
    its sweep's code (``experiments.make_task``,
    ``EngineTask.client_updates`` and ``metrics``), setting (2), seed 0: one warm-up round of K clients, then
    ``rounds`` rounds timed (device synchronized); one warm-up evaluation (test accuracy and the training loss
    over all clients' data), then one timed. Data: Fashion-MNIST where present, else random images of its shapes
    (``synthetic``: that many training images, a sixth as many test images). Rows (metric, value, unit): the
    rates, and the GPU minutes they give the ledger's items (flkit.owed's counts of client trainings of ~2,400
    samples and of evaluation forward passes; the loop's overheads beyond these two rates, such as pow-d's loss
    probes and the samplers, are not counted)."""
    import torch
    from flkit import datasets, fl, owed
    from flkit.papers.hics import entropy as E
    from flkit.papers.hics import fmnist as X
    from flkit.seeding import resolve_device
    dev = resolve_device(device)
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    cfg = X.profile("paper")
    if synthetic:
        data, source = _synthetic_fmnist(synthetic, max(synthetic // 6, 10), dev), f"synthetic ({synthetic} images)"
    elif datasets.available("fashion-mnist"):
        data, source = datasets.load("fashion-mnist", device=dev), "Fashion-MNIST"
    else:
        data, source = _synthetic_fmnist(60_000, 10_000, dev), "synthetic (Fashion-MNIST's sizes)"
    part = E.make_partition(data.y_train.cpu().numpy(), cfg["clients"], X.split_alphas("(2)"), 0)
    task = X.make_task(data, part, dict(cfg, subset=None))
    w = task.init_params([0])
    runs = fl.Runs([0], torch.tensor([float(cfg["lr"])], dtype=task.dtype), ["random"])
    K, N = cfg["k"], task.num_clients

    def round_(t: int) -> int:
        clients = [(t * K + i) % N for i in range(K)]
        active = torch.zeros(1, N, dtype=torch.bool)
        active[0, clients] = True
        task.client_updates(w, active, t, runs)
        return int(sum(part.sizes[c] for c in clients)) * cfg["epochs"]

    round_(0)
    sync()
    tic, samples = time.perf_counter(), 0
    for t in range(1, rounds + 1):
        samples += round_(t)
    sync()
    train_s = time.perf_counter() - tic
    task.metrics(w)
    sync()
    tic = time.perf_counter()
    task.metrics(w)
    sync()
    eval_s = time.perf_counter() - tic
    images = len(data.y_train) + len(data.y_test)
    train_rate, eval_rate = samples / train_s, images / eval_s
    per_training = 2 * 1200                   # the ledger's client training: 2 epochs x ~1,200 images

    def forwards(evals, probes):              # evaluation forwards: the evaluations and pow-d's loss probes
        return evals * owed._EVAL_FORWARDS + probes * owed._PROBE_FORWARDS
    rows = [("seconds_per_client", train_s / (rounds * K), "s (this partition's clients)"),
            ("train_samples_per_s", train_rate, "samples/s"),
            ("seconds_per_evaluation", eval_s, f"s ({images} images)"),
            ("eval_forwards_per_s", eval_rate, "images/s"),
            ("minutes_hics-fmnist-s2",
             (owed._S2_TRAININGS * per_training / train_rate + forwards(owed._S2_EVALS, owed._S2_PROBES) / eval_rate)
             / 60, "min on this device (projected)"),
            ("minutes_hics-fmnist-paper",
             ((owed._ALL_TRAININGS - owed._S2_TRAININGS) * per_training / train_rate
              + forwards(owed._ALL_EVALS - owed._S2_EVALS, owed._ALL_PROBES - owed._S2_PROBES) / eval_rate) / 60,
             "min on this device (projected)")]
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    return [dict(model="hics_fmnist_paper", metric=m, value=v, unit=u, data=source, timed_rounds=rounds,
                 clients_per_round=K, device=name, torch=torch.__version__) for m, v, u in rows]


# ------------------------------------------------------------------------------------------------ command line
def check_args(minutes: str, device: str, env: str, out: str | None, dry_run: bool) -> float:
    """The window's arguments, before any work: BadInput (one line) for minutes outside [4, 10] (checks and
    one piece need 4; one device command runs at most 10), a device other than cuda/cpu, cuda with --dry-run,
    a missing environment file, $OUT unset, not a folder or not empty."""
    try:
        m = float(minutes)
    except (TypeError, ValueError):
        m = math.nan
    if not math.isfinite(m):
        raise BadInput(f"--minutes must be a number, got {minutes!r}")
    if m < MIN_MINUTES:
        raise BadInput(f"--minutes {minutes}: a window needs at least {MIN_MINUTES:g} (a minute of checks, the "
                       "pay's shortest piece, packing)")
    if m > MAX_MINUTES:
        raise BadInput(f"--minutes {minutes}: one device command runs at most {MAX_MINUTES:g} minutes; ask for "
                       f"at most {MAX_MINUTES - 0.5:g} with timeout_s 600")
    if device not in ("cuda", "cpu"):
        raise BadInput(f"--device must be cuda or cpu, got {device!r}")
    if device == "cpu" and not dry_run:
        raise BadInput("--device cpu goes with --dry-run (a CPU pays with python -m flkit.owed --pay)")
    if not Path(env).is_file():
        raise BadInput(f"{env} is missing: carry the folder .device "
                       "(made here by bash scripts/gpu_window.sh --prepare mnist)")
    if not out:
        raise BadInput("$OUT is not set (the device tool sets it; for a dry run: OUT=/tmp/some-empty-folder)")
    o = Path(out)
    if o.exists() and (not o.is_dir() or any(o.iterdir())):
        raise BadInput(f"$OUT {out} is not an empty folder (the window's files must be all that comes back)")
    return m


CARRY_CAP = 64 * 2**20          # what a device call carries: the working tree and the carried paths


def travel_size(repo=None, carry=(".device",)) -> dict[str, int]:
    """Bytes a device call would carry from ``repo``: its working tree (tracked files and untracked files git
    does not ignore; links as links) and each carried path."""
    import subprocess
    repo = Path(repo or _REPO)
    names = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=repo, check=True,
                           capture_output=True).stdout.decode().split("\0")
    tree = sum(os.lstat(repo / n).st_size for n in names if n and os.path.lexists(repo / n))
    out = {"working tree": tree}
    for c in carry:
        p = repo / c
        out[c] = sum(f.stat().st_size for f in p.rglob("*") if f.is_file() and not f.is_symlink()) if p.is_dir() else 0
    return out


_ENV_MARK = "# flkit.window prepare: data only"
_ENV_SH = _ENV_MARK + """ (a window runs no notebook: no papermill wheels). Sourced in the repository root.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export FLKIT_DATA="$PWD/.device/data"
if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; fi
true
"""
_TV_FOLDER = {"mnist": "MNIST", "fashion-mnist": "FashionMNIST"}


def prepare(sets, dest=None, data_root=None) -> Path:
    """A lean carried folder ``dest`` (default ``<repo>/.device``): the verified ``.gz`` files of ``sets``
    (mnist, fashion-mnist) from the data root in torchvision's layout, and an ``env.sh`` that sets
    ``FLKIT_DATA`` and ``PYTHONPATH`` (no wheels: ~15 MB less than the notebook recipe's folder). Replaces a
    folder it made before; BadInput for any other existing folder, an unknown set or one not present here."""
    import shutil
    from flkit import datasets
    dest = Path(dest or _REPO / ".device")
    bad = [s for s in sets if s not in _TV_FOLDER]
    if bad or not sets:
        raise BadInput(f"data sets must be among {sorted(_TV_FOLDER)}, got {list(sets)}")
    missing = [s for s in sets if not datasets.available(s, data_root)]
    if missing:
        raise BadInput(f"{', '.join(missing)} not found (verified) under {datasets.data_root(data_root)}")
    if dest.exists():
        env = dest / "env.sh"
        if not (env.is_file() and env.read_text().startswith(_ENV_MARK)):
            raise BadInput(f"{dest} exists and was not made by this command: move it away first")
        shutil.rmtree(dest)
    for s in sets:
        src = datasets.data_root(data_root) / _TV_FOLDER[s] / "raw"
        out = dest / "data" / _TV_FOLDER[s] / "raw"
        out.mkdir(parents=True)
        for f in sorted(src.glob("*.gz")):
            shutil.copyfile(f, out / f.name)
    (dest / "env.sh").write_text(_ENV_SH)
    return dest


def _size_report() -> int:
    sizes = travel_size()
    total = sum(sizes.values())
    for k, v in sizes.items():
        print(f"{k:<14} {v / 2**20:6.1f} MiB")
    data = _REPO / ".device" / "data"
    sets = sorted(p.name for p in data.iterdir()) if data.is_dir() else []
    print(f"{'together':<14} {total / 2**20:6.1f} MiB of {CARRY_CAP // 2**20} "
          f"(.device data: {', '.join(sets) or 'none'})")
    if total > CARRY_CAP:
        print("over: carry fewer data sets (python -m flkit.window prepare mnist), or leave book/ out of the tree")
        return 1
    return 0


class _OneLine(argparse.ArgumentParser):
    def error(self, message):   # one line, exit status 2
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def main(argv=None) -> int:
    ap = _OneLine(prog="python -m flkit.window", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="check a window's arguments (one line, exit 2, on bad input)")
    c.add_argument("--minutes", default=None)
    c.add_argument("--device", default="cuda")
    c.add_argument("--env", default=".device/env.sh")
    c.add_argument("--out", default=None)
    c.add_argument("--dry-run", action="store_true")
    t = sub.add_parser("tag", help="print the device's short name (h100, h200, ..., cpu)")
    t.add_argument("--device", default="cuda")
    h = sub.add_parser("hics-rate", help="time the HiCS-FL Fashion-MNIST CNN's client training and evaluation")
    h.add_argument("--device", default="cuda")
    h.add_argument("--rounds", type=int, default=3)
    h.add_argument("--synthetic", type=int, default=None, help="random images: this many (a dry run's)")
    h.add_argument("--threads", type=int, default=None)
    h.add_argument("--out", type=Path, default=None, help="CSV to write")
    s = sub.add_parser("snapshot", help="write {file: [size, sha256]} of a results root as JSON")
    s.add_argument("root", type=Path)
    s.add_argument("file", type=Path)
    p = sub.add_parser("pack", help="pack what changed since a snapshot into a folder (the window's $OUT)")
    p.add_argument("--root", type=Path, default=None)
    p.add_argument("--before", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--log", type=Path, default=None)
    p.add_argument("--notes", type=Path, default=None, help="a file of lines for the manifest")
    sub.add_parser("size", help="what a device call would carry: the working tree and .device, in MiB")
    pr = sub.add_parser("prepare", help="make a lean .device: data sets and env.sh, no wheels")
    pr.add_argument("sets", nargs="+", help="mnist, fashion-mnist")
    pr.add_argument("--dest", type=Path, default=None, help="default: <repo>/.device")
    u = sub.add_parser("unpack", help="restore a window's files into the results root")
    u.add_argument("folder", type=Path)
    u.add_argument("--root", type=Path, default=None, help="default: $FLKIT_RESULTS, else <repo>/results")
    u.add_argument("--dry-run", action="store_true", help="check and list, write nothing")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "check":
            check_args(args.minutes, args.device, args.env, args.out, args.dry_run)
            return 0
        if args.cmd == "tag":
            import torch
            if args.device != "cpu" and not torch.cuda.is_available():
                raise BadInput(f"--device {args.device}: this machine has no CUDA device")
            print(gpu_tag(args.device))
            return 0
        if args.cmd == "hics-rate":
            import torch
            if args.threads:
                torch.set_num_threads(args.threads)
            rows = hics_rate(args.device, args.rounds, args.synthetic)
            import pandas as pd
            df = pd.DataFrame(rows)
            print(df[["metric", "value", "unit", "data", "device"]].to_string(index=False))
            if args.out:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                df.to_csv(args.out, index=False)
                print(f"wrote {args.out}")
            return 0
        if args.cmd == "size":
            return _size_report()
        if args.cmd == "prepare":
            print(f"wrote {prepare(args.sets, args.dest)}")
            return _size_report() if args.dest is None else 0
        if args.cmd == "snapshot":
            args.file.write_text(json.dumps(snapshot(args.root)))
            return 0
        if args.cmd == "pack":
            if not args.before.is_file():
                raise BadInput(f"--before {args.before}: no such snapshot")
            notes = args.notes.read_text().splitlines() if args.notes and args.notes.is_file() else []
            return pack(results_root(args.root), json.loads(args.before.read_text()), args.out, log=args.log,
                        notes=notes)
        if args.cmd == "unpack":
            if not args.folder.is_dir():
                raise BadInput(f"{args.folder}: no such folder")
            unpack(args.folder, args.root, dry_run=args.dry_run)
            return 0
    except BadInput as e:
        ap.error(" ".join(str(e).split()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
