"""Datasets of the documents: real image data sets as whole tensors, and small synthetic problems.

Real data (``load``)
    MNIST, Fashion-MNIST, CIFAR-10, CIFAR-100 and SVHN are read through torchvision's dataset classes
    (their ``.data``/``.targets`` arrays, converted once into tensors), CINIC-10 from its official folder
    layout. Nothing is ever downloaded: before torchvision is called, every file it needs is checked
    against the MD5 that torchvision itself knows, and a missing file raises `DatasetNotFoundError`, a
    corrupt one `DatasetCorruptError`. torchvision is only allowed to *extract* archives whose MD5 has
    just been verified (MNIST's ``.gz`` files, the CIFAR ``.tar.gz``).

    The data root is a torchvision root (``data_root``: argument, else ``$FLKIT_DATA``, else
    ``<repo>/data``), so a folder filled by ``torchvision.datasets.X(root, download=True)`` elsewhere
    works as it is::

        <root>/MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz
        <root>/FashionMNIST/raw/  (same four names)
        <root>/cifar-10-batches-py/{data_batch_1..5,test_batch,batches.meta}  or <root>/cifar-10-python.tar.gz
        <root>/cifar-100-python/{train,test,meta}                            or <root>/cifar-100-python.tar.gz
        <root>/{train,test}_32x32.mat                                          (SVHN)
        <root>/CINIC-10/{train,valid,test}/<class>/*.png                       (valid is not loaded)

    ``python -m flkit.datasets import SRC [--root R]`` copies the files of a flat folder
    (``SRC/mnist/*.gz``, ``SRC/fashion-mnist/*.gz``, optionally ``SRC/svhn/*.mat``,
    ``SRC/cifar10/cifar-10-python.tar.gz``, ``SRC/cifar100/cifar-100-python.tar.gz``) into that layout.

Normalization (``STATS``, ``PAPER_STATS``, ``normalize``)
    ``PAPER_STATS[(paper, dataset)]`` holds the per-channel (mean, std) each document's code uses;
    ``STATS[dataset]`` is FedAU's choice for the four FedAU data sets. FedAU's code reuses the CIFAR-10
    statistics for CIFAR-100 and the MNIST statistics for Fashion-MNIST; HiCS-FL uses (0.5, 0.5) for
    Fashion-MNIST and its own CIFAR-10 std. Fed-CVaR-Avg does not normalize (inputs in [0, 1]).

Synthetic data
    ``quadratic_clients`` (MIFA / U-MIFA quadratic, doc 002), ``logistic_data`` (planted logistic
    model, CA-Fed's synthetic set), ``blobs_2d`` (Fed-CVaR-Avg's 2-D examples).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import struct
import sys
import warnings
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from flkit.seeding import rng

NAMES = ("mnist", "fashion-mnist", "cifar10", "cifar100", "svhn", "cinic10")
_ALIASES = {"fmnist": "fashion-mnist", "fashionmnist": "fashion-mnist", "cifar-10": "cifar10",
            "cifar-100": "cifar100", "cinic-10": "cinic10"}

REPO = Path(__file__).resolve().parents[1]
DIGITS = [str(d) for d in range(10)]
CINIC_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
CINIC_SPLIT_SIZE = 90_000  # images per split in the official release (9,000 per class)

SOURCES = {
    "mnist": "http://yann.lecun.com/exdb/mnist/ (torchvision mirror: https://ossci-datasets.s3.amazonaws.com/mnist/)",
    "fashion-mnist": "https://github.com/zalandoresearch/fashion-mnist",
    "cifar10": "https://www.cs.toronto.edu/~kriz/cifar.html (cifar-10-python.tar.gz)",
    "cifar100": "https://www.cs.toronto.edu/~kriz/cifar.html (cifar-100-python.tar.gz)",
    "svhn": "http://ufldl.stanford.edu/housenumbers/ (train_32x32.mat, test_32x32.mat)",
    "cinic10": "https://datashare.ed.ac.uk/handle/10283/3192 (CINIC-10.tar.gz, extract into <root>/CINIC-10)",
}

# Per-channel (mean, std) used by each document's code: IBM/fedau@6e9cce9 dataset/dataset.py::load_data and
# config.py; CityChan/HiCS-FL@25f309d sampling.py::partition_data_various_alpha (book/appendix/provenance.md).
_CIFAR10_FEDAU = ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010))
PAPER_STATS: dict[tuple[str, str], tuple[tuple[float, ...], tuple[float, ...]]] = {
    ("fedau", "svhn"): ((0.4376821, 0.4437697, 0.47280442), (0.19803012, 0.20101562, 0.19703614)),
    ("fedau", "cifar10"): _CIFAR10_FEDAU,
    ("fedau", "cifar100"): _CIFAR10_FEDAU,  # the code reuses the CIFAR-10 statistics
    ("fedau", "cinic10"): ((0.47889522, 0.47227842, 0.43047404), (0.24205776, 0.23828046, 0.25874835)),
    ("fedau", "fashion-mnist"): ((0.1307,), (0.3081,)),  # the code reuses the MNIST statistics
    ("hics", "fashion-mnist"): ((0.5,), (0.5,)),
    ("hics", "cifar10"): ((0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261)),
}
STATS = {name: PAPER_STATS[("fedau", name)] for name in ("svhn", "cifar10", "cifar100", "cinic10")}


class DatasetNotFoundError(FileNotFoundError):
    """Files of a dataset are missing; the message says which, where, and how to provide them."""


class DatasetCorruptError(RuntimeError):
    """A dataset file does not match its known checksum (or cannot be decoded)."""


# --------------------------------------------------------------------------------------- container

@dataclass
class Dataset:
    """Train and test tensors of one dataset: x float32 (N, C, H, W) in [0, 1] (or uint8), y int64."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    classes: list[str]

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def to(self, device) -> "Dataset":
        """The same dataset with its four tensors on `device` (tensors already there are not copied)."""
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        for key in ("x_train", "y_train", "x_test", "y_test"):
            moved[key] = moved[key].to(device)
        return Dataset(**moved)

    def __repr__(self) -> str:
        x = self.x_train
        return (f"Dataset({self.name!r}, train={tuple(x.shape)}, test={tuple(self.x_test.shape)}, "
                f"dtype={x.dtype}, device={x.device}, classes={self.num_classes})")


# ------------------------------------------------------------------------------------------- roots

def _root_and_origin(root=None) -> tuple[Path, str]:
    if root is not None:
        return Path(root).expanduser(), "the root argument"
    if os.environ.get("FLKIT_DATA"):
        return Path(os.environ["FLKIT_DATA"]).expanduser(), "$FLKIT_DATA"
    return REPO / "data", "the default <repo>/data (set FLKIT_DATA to change it)"


def data_root(root=None) -> Path:
    """Dataset root: `root` if given, else ``$FLKIT_DATA``, else ``<repo>/data``."""
    return _root_and_origin(root)[0]


def canonical_name(name: str) -> str:
    """The canonical dataset name (a few aliases such as "fmnist" are accepted); ValueError otherwise."""
    key = str(name).lower()
    key = _ALIASES.get(key, key)
    if key not in NAMES:
        raise ValueError(f"unknown dataset {name!r}; choose one of {NAMES}")
    return key


# ------------------------------------------------------------------------------------ file checks

def md5(path: Path) -> str:
    """Hex MD5 of a file (what torchvision's checksum tables hold)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "md5").hexdigest()


def _verify(path: Path, expected: str) -> None:
    actual = md5(path)
    if actual != expected:
        raise DatasetCorruptError(
            f"{path} is corrupt: MD5 {actual}, expected {expected} (torchvision's checksum of the official "
            f"file). Replace it with the official file; flkit never re-downloads or repairs data."
        )


def _not_found(name: str, missing: Sequence[str], where: Path, root: Path, origin: str, how: str = ""):
    hint = _import_hint(name, root)
    return DatasetNotFoundError(
        f"dataset {name!r} not found: missing {', '.join(missing)} in {where} (data root {root}, from {origin}). "
        f"{how}"
        f"To provide it: copy the files there, or set FLKIT_DATA to a data root that has them, or run "
        f"`python -m flkit.datasets import /path/to/folder --root {root}` on a flat folder with "
        f"mnist/, fashion-mnist/ (svhn/, cifar10/, cifar100/) subfolders.{hint} "
        f"Official source: {SOURCES[name]} (the project's machines have no internet access)."
    )


def _import_hint(name: str, root: Path) -> str:
    """Point at a flat folder (the root itself, or ../shared/data beside the repo) that holds the files."""
    sub = _FLAT_DIRS.get(name)
    if sub is None:
        return ""
    for src in (root, REPO.parent / "shared" / "data"):
        if (src / sub).is_dir():
            return f" The files seem to be in {src / sub}: run `python -m flkit.datasets import {src} --root {root}`."
    return ""


def _gzip_size(path: Path) -> int:
    """Uncompressed size recorded in a gzip trailer (mod 2**32)."""
    with open(path, "rb") as f:
        f.seek(-4, os.SEEK_END)
        return struct.unpack("<I", f.read(4))[0]


def _tv_class(name: str):
    from torchvision import datasets as tvd
    return {"mnist": tvd.MNIST, "fashion-mnist": tvd.FashionMNIST, "cifar10": tvd.CIFAR10,
            "cifar100": tvd.CIFAR100, "svhn": tvd.SVHN}[name]


def _check_mnist(name: str, root: Path, origin: str) -> bool:
    """Verify the four .gz files; return True when torchvision still has to extract some of them."""
    cls = _tv_class(name)
    raw = root / cls.__name__ / "raw"
    missing = [f for f, _ in cls.resources if not (raw / f).is_file()]
    if missing:
        raise _not_found(name, missing, raw, root, origin)
    need_extract = False
    for f, digest in cls.resources:
        _verify(raw / f, digest)
        extracted = raw / f[: -len(".gz")]
        if not extracted.is_file():
            need_extract = True
        elif extracted.stat().st_size % 2**32 != _gzip_size(raw / f):
            raise DatasetCorruptError(
                f"{extracted} has {extracted.stat().st_size} bytes but its verified archive {f} holds "
                f"{_gzip_size(raw / f)}; delete {extracted} so that it is extracted again from the archive."
            )
    return need_extract


def _check_cifar(name: str, root: Path, origin: str) -> bool:
    """Verify the extracted batch files (or the archive); return True when the archive must be extracted."""
    cls = _tv_class(name)
    folder = root / cls.base_folder
    wanted = [*cls.train_list, *cls.test_list, [cls.meta["filename"], cls.meta["md5"]]]
    present = [(f, d) for f, d in wanted if (folder / f).is_file()]
    for f, digest in present:
        _verify(folder / f, digest)
    if len(present) == len(wanted):
        return False
    archive = root / cls.filename
    if not archive.is_file():
        missing = [f for f, _ in wanted if not (folder / f).is_file()]
        how = f"Alternatively put the archive {cls.filename} (MD5 {cls.tgz_md5}) in {root}. "
        raise _not_found(name, missing, folder, root, origin, how)
    _verify(archive, cls.tgz_md5)
    return True


def _check_svhn(root: Path, origin: str) -> None:
    cls = _tv_class("svhn")
    files = [cls.split_list[s][1:] for s in ("train", "test")]
    missing = [f for f, _ in files if not (root / f).is_file()]
    if missing:
        raise _not_found("svhn", missing, root, root, origin)
    for f, digest in files:
        _verify(root / f, digest)


def _cinic_files(root: Path, origin: str) -> dict[str, list[tuple[Path, int]]]:
    """(png path, label) per split, classes in alphabetical order as torchvision's ImageFolder does."""
    base = root / "CINIC-10"
    missing = [f"{s}/{c}/" for s in ("train", "test") for c in CINIC_CLASSES if not (base / s / c).is_dir()]
    if missing:
        raise _not_found("cinic10", missing if len(missing) < 20 else ["train/", "test/ (with 10 class folders each)"],
                         base, root, origin)
    out = {}
    for split in ("train", "test"):
        extra = sorted(p.name for p in (base / split).iterdir() if p.is_dir() and p.name not in CINIC_CLASSES)
        if extra:
            raise DatasetCorruptError(f"{base / split} has unexpected class folders {extra}; expected {CINIC_CLASSES}")
        items = [(p, y) for y, c in enumerate(CINIC_CLASSES) for p in sorted((base / split / c).glob("*.png"))]
        empty = [c for c in CINIC_CLASSES if not any((base / split / c).glob("*.png"))]
        if empty:
            raise _not_found("cinic10", [f"{split}/{c}/*.png" for c in empty], base, root, origin)
        if len(items) != CINIC_SPLIT_SIZE:
            warnings.warn(f"CINIC-10 {split} split in {base / split} has {len(items)} images, "
                          f"the official release has {CINIC_SPLIT_SIZE}", stacklevel=3)
        out[split] = items
    return out


# ----------------------------------------------------------------------------------------- loaders

def _to_tensors(x: np.ndarray | torch.Tensor, y) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.as_tensor(np.ascontiguousarray(x) if isinstance(x, np.ndarray) else x)
    return x.contiguous(), torch.as_tensor(np.asarray(y), dtype=torch.int64)


def _extract(name: str, root: Path, origin: str) -> bool:
    """Verify the files of an MNIST-like or CIFAR dataset and let torchvision extract what is not yet
    extracted (its ``download=True`` finds the verified archives and only extracts). True if it did."""
    check = _check_mnist if name in ("mnist", "fashion-mnist") else _check_cifar
    if not check(name, root, origin):
        return False
    _tv_class(name)(str(root), train=True, download=True)
    return True


def _load_mnist(name: str, root: Path, origin: str):
    _extract(name, root, origin)
    cls = _tv_class(name)
    tr, te = (cls(str(root), train=t) for t in (True, False))
    classes = DIGITS if name == "mnist" else list(cls.classes)
    return (*_to_tensors(tr.data[:, None], tr.targets), *_to_tensors(te.data[:, None], te.targets), classes)


def _load_cifar(name: str, root: Path, origin: str):
    _extract(name, root, origin)
    cls = _tv_class(name)
    tr, te = (cls(str(root), train=t) for t in (True, False))
    nchw = lambda d: d.transpose(0, 3, 1, 2)  # torchvision keeps CIFAR as (N, H, W, C)
    return (*_to_tensors(nchw(tr.data), tr.targets), *_to_tensors(nchw(te.data), te.targets), list(tr.classes))


def _load_svhn(root: Path, origin: str):
    _check_svhn(root, origin)
    cls = _tv_class("svhn")
    tr, te = (cls(str(root), split=s, download=False) for s in ("train", "test"))  # labels: 10 -> 0 done there
    return (*_to_tensors(tr.data, tr.labels), *_to_tensors(te.data, te.labels), DIGITS)


def _read_png(path: Path) -> np.ndarray:
    from PIL import Image
    try:
        with Image.open(path) as img:
            arr = np.asarray(img.convert("RGB"))  # a few CINIC-10 images are grayscale
    except Exception as e:  # PIL raises several types for broken files
        raise DatasetCorruptError(f"cannot decode {path}: {e}") from e
    if arr.shape != (32, 32, 3):
        raise DatasetCorruptError(f"{path} has shape {arr.shape}, expected 32x32 RGB")
    return arr


def _load_cinic(root: Path, origin: str):
    from tqdm.auto import tqdm
    splits = _cinic_files(root, origin)
    out = []
    for split, items in splits.items():
        it = tqdm(items, desc=f"CINIC-10 {split}", disable=len(items) < 5000, leave=False)
        x = np.stack([_read_png(p) for p, _ in it]).transpose(0, 3, 1, 2)
        out += _to_tensors(x, [y for _, y in items])
    return (*out, list(CINIC_CLASSES))


def load(name: str, root=None, *, as_uint8: bool = False, device="cpu") -> Dataset:
    """Load the train and test split of `name` (one of `NAMES`) as whole tensors.

    Images are (N, C, H, W): float32 in [0, 1], or uint8 in [0, 255] with ``as_uint8=True``; labels
    int64. Files are looked up under ``data_root(root)`` (layout in the module docstring) and checked
    before use: `DatasetNotFoundError` if missing, `DatasetCorruptError` if an MD5 does not match.
    CINIC-10: train and test splits only (``valid/`` is not used, as in FedAU).
    """
    name = canonical_name(name)
    path, origin = _root_and_origin(root)
    if name in ("mnist", "fashion-mnist"):
        parts = _load_mnist(name, path, origin)
    elif name in ("cifar10", "cifar100"):
        parts = _load_cifar(name, path, origin)
    elif name == "svhn":
        parts = _load_svhn(path, origin)
    else:
        parts = _load_cinic(path, origin)
    x_train, y_train, x_test, y_test, classes = parts
    data = Dataset(name, x_train, y_train, x_test, y_test, classes).to(device)
    if not as_uint8:
        data.x_train = data.x_train.float().div_(255)
        data.x_test = data.x_test.float().div_(255)
    return data


def available(name: str, root=None) -> bool:
    """True if the files of `name` are present and verified, False if missing; raises if corrupt."""
    name = canonical_name(name)
    path, origin = _root_and_origin(root)
    try:
        if name in ("mnist", "fashion-mnist"):
            _check_mnist(name, path, origin)
        elif name in ("cifar10", "cifar100"):
            _check_cifar(name, path, origin)
        elif name == "svhn":
            _check_svhn(path, origin)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _cinic_files(path, origin)
    except DatasetNotFoundError:
        return False
    return True


# ------------------------------------------------------------------------------------ normalization

def normalize(x: torch.Tensor, mean, std) -> torch.Tensor:
    """Per-channel ``(x - mean) / std`` of a (N, C, H, W) batch, on x's device.

    uint8 input is first scaled to [0, 1] (as ``ToTensor`` does), so the documents' statistics apply.
    """
    if x.dtype == torch.uint8:
        x = x.float() / 255
    mean = torch.as_tensor(mean, dtype=x.dtype, device=x.device).reshape(1, -1, 1, 1)
    std = torch.as_tensor(std, dtype=x.dtype, device=x.device).reshape(1, -1, 1, 1)
    if x.ndim != 4 or mean.shape[1] != x.shape[1] or std.shape[1] != x.shape[1]:
        raise ValueError(f"normalize expects (N, C, H, W) with C = len(mean) = len(std); got x {tuple(x.shape)}, "
                         f"{mean.shape[1]} means, {std.shape[1]} stds")
    return (x - mean) / std


# ----------------------------------------------------------------------------------------- import

# subfolder of a flat source folder (as /work/shared/data) holding each dataset's files
_FLAT_DIRS = {"mnist": "mnist", "fashion-mnist": "fashion-mnist", "svhn": "svhn",
              "cifar10": "cifar10", "cifar100": "cifar100"}


def _import_table() -> dict[str, tuple[str, list[tuple[str, str]]]]:
    """dataset -> (destination relative to the data root, [(file, md5)]), from torchvision's classes."""
    tv = {n: _tv_class(n) for n in _FLAT_DIRS}
    return {
        "mnist": ("MNIST/raw", [tuple(r) for r in tv["mnist"].resources]),
        "fashion-mnist": ("FashionMNIST/raw", [tuple(r) for r in tv["fashion-mnist"].resources]),
        "svhn": (".", [tuple(tv["svhn"].split_list[s][1:]) for s in ("train", "test")]),
        "cifar10": (".", [(tv["cifar10"].filename, tv["cifar10"].tgz_md5)]),
        "cifar100": (".", [(tv["cifar100"].filename, tv["cifar100"].tgz_md5)]),
    }


def import_files(src, root=None) -> list[str]:
    """Copy dataset files from a flat folder into the torchvision layout under ``data_root(root)``.

    `src` holds subfolders ``mnist/`` and ``fashion-mnist/`` with the official ``.gz`` files (as the
    shared data folder of scripts/setup_env.sh does), and optionally ``svhn/`` (``*_32x32.mat``), ``cifar10/`` and
    ``cifar100/``
    (the ``.tar.gz`` archives). Every source file is MD5-checked before it is copied; files already
    present with the right MD5 are skipped, a present file with a wrong MD5 raises
    `DatasetCorruptError` (delete it, then import again). Complete archives are then extracted (by
    torchvision), so that loading only reads. Returns one line per action, saying what was done.
    """
    src = Path(src).expanduser()
    dest_root = data_root(root)
    if not any((src / sub).is_dir() for sub in _FLAT_DIRS.values()):
        raise DatasetNotFoundError(f"{src} has none of the subfolders {list(_FLAT_DIRS.values())}")
    log = []
    for name, (rel, files) in _import_table().items():
        if not (src / _FLAT_DIRS[name]).is_dir():
            log.append(f"{name}: no folder {src / _FLAT_DIRS[name]}, skipped")
            continue
        for fname, digest in files:
            log.append(f"{name}: {_import_one(src / _FLAT_DIRS[name] / fname, dest_root / rel / fname, digest)}")
        if name != "svhn":  # extract now, so that later loads (maybe parallel notebooks) only read
            try:
                if _extract(name, dest_root, "the import"):
                    log.append(f"{name}: extracted the verified archives in {dest_root / rel}")
            except DatasetNotFoundError:
                log.append(f"{name}: incomplete in {dest_root}, not extracted")
    return log


def _import_one(source: Path, target: Path, digest: str) -> str:
    if target.is_file():
        _verify(target, digest)
        return f"{target} already present (MD5 ok), skipped"
    if not source.is_file():
        return f"{source} missing in the source folder, skipped"
    _verify(source, digest)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".part")
    shutil.copyfile(source, tmp)
    os.replace(tmp, target)
    return f"copied {source} -> {target}"


# -------------------------------------------------------------------------------------- synthetic

@dataclass
class QuadraticProblem:
    r"""n clients with :math:`f_i(w) = \tfrac12 (w-b_i)^\top A_i (w-b_i)` and :math:`f = \tfrac1n\sum_i f_i`.

    ``A[i]`` is the diagonal of the diagonal matrix :math:`A_i` (shape (n, d)); ``b`` is (n, d).
    Everything is float64. The optimum is closed form, :math:`w^\star = (\sum_i A_i)^{-1}\sum_i A_i b_i`.
    `L` is the largest eigenvalue over all clients (each f_i, hence f, is L-smooth) and `mu` the smallest
    eigenvalue of the global Hessian :math:`\tfrac1n\sum_i A_i` (f is mu-strongly convex).
    All functions take w of shape (..., d), so several runs can be evaluated at once.
    """

    A: torch.Tensor
    b: torch.Tensor

    @property
    def n_clients(self) -> int:
        return self.A.shape[0]

    @property
    def dim(self) -> int:
        return self.A.shape[1]

    @property
    def w_star(self) -> torch.Tensor:
        """A minimizer: in a coordinate with zero curvature for every client (f flat there, the minimizers
        form an affine set) we take the mean of the b_i's coordinate."""
        S = self.A.sum(0)
        return torch.where(S > 0, (self.A * self.b).sum(0) / torch.where(S > 0, S, 1.0), self.b.mean(0))

    @property
    def f_star(self) -> torch.Tensor:
        return self.f(self.w_star)

    @property
    def L(self) -> float:
        return float(self.A.max())

    @property
    def mu(self) -> float:
        return float(self.A.mean(0).min())

    def client_losses(self, w: torch.Tensor) -> torch.Tensor:
        """f_i(w) for every client: shape (..., n)."""
        diff = w[..., None, :] - self.b
        return 0.5 * (self.A * diff * diff).sum(-1)

    def client_grads(self, w: torch.Tensor) -> torch.Tensor:
        """grad f_i(w) = A_i (w - b_i) for every client: shape (..., n, d)."""
        return self.A * (w[..., None, :] - self.b)

    def f(self, w: torch.Tensor) -> torch.Tensor:
        return self.client_losses(w).mean(-1)

    def grad(self, w: torch.Tensor) -> torch.Tensor:
        return self.client_grads(w).mean(-2)

    def to(self, device) -> "QuadraticProblem":
        return QuadraticProblem(self.A.to(device), self.b.to(device))


def quadratic_clients(n_clients: int, dim: int, seed: int, heterogeneity: float = 1.0,
                      mu: float = 1.0, L: float = 10.0) -> QuadraticProblem:
    """Random strongly convex quadratic clients (doc 002's "simple quadratic" experiment).

    Each A_i is diagonal with the same spectrum, ``geomspace(mu, L, dim)``, placed on the diagonal in a
    client-specific random order, so every f_i is exactly mu-strongly convex and L-smooth (dim >= 2) while
    the clients' curvatures differ. Optima b_i = c + heterogeneity * z_i with c, z_i ~ N(0, I): with
    ``heterogeneity=0`` all clients share the optimum (no client drift). Drawn from ``rng(seed, "data")``.
    """
    if not 0 < mu <= L:
        raise ValueError(f"need 0 < mu <= L, got mu={mu}, L={L}")
    if n_clients < 1 or dim < 1 or heterogeneity < 0:
        raise ValueError(f"need n_clients >= 1, dim >= 1, heterogeneity >= 0; got {n_clients}, {dim}, {heterogeneity}")
    g = rng(seed, "data")
    spectrum = np.geomspace(mu, L, dim)
    A = np.stack([g.permutation(spectrum) for _ in range(n_clients)])
    b = g.standard_normal(dim) + heterogeneity * g.standard_normal((n_clients, dim))
    return QuadraticProblem(torch.tensor(A, dtype=torch.float64), torch.tensor(b, dtype=torch.float64))


def logistic_data(n: int, dim: int, seed: int, *, w_star=None, flip_prob: float = 0.0,
                  deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Binary logistic data from a planted model (CA-Fed's synthetic set).

    x ~ N(0, I_dim); y ~ Bernoulli(sigmoid(x . w_star)) (or y = 1[x . w_star > 0] if `deterministic`);
    then each label is flipped with probability `flip_prob` (CA-Fed's second cluster uses 0.2).
    w_star ~ N(0, I_dim) unless given (pass the same w_star to build clients of one problem).
    Returns X float32 (n, dim), y int64 (n,) in {0, 1}, w_star float32 (dim,).
    """
    if not 0 <= flip_prob <= 1:
        raise ValueError(f"flip_prob must be in [0, 1], got {flip_prob}")
    g = rng(seed, "data")
    w = g.standard_normal(dim) if w_star is None else np.asarray(w_star, dtype=np.float64).reshape(dim)
    X = g.standard_normal((n, dim))
    logits = X @ w
    y = (logits > 0) if deterministic else g.random(n) < 1 / (1 + np.exp(-logits))
    y = np.where(g.random(n) < flip_prob, ~y, y)
    return (torch.tensor(X, dtype=torch.float32), torch.tensor(y, dtype=torch.int64),
            torch.tensor(w, dtype=torch.float32))


def blobs_2d(centers, n_per_class: int, std: float, seed: int, *,
             sklearn_seed: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Isotropic Gaussian blobs (sklearn ``make_blobs``), one class per center, shuffled.

    By default the randomness comes from ``rng(seed, "data")``. With ``sklearn_seed=True`` `seed` is passed
    straight to ``make_blobs(random_state=seed)``: Fed-CVaR-Avg's notebooks use random_state=11, 1000
    points per class and std 0.1, so ``blobs_2d(centers, 1000, 0.1, 11, sklearn_seed=True)`` gives their points.
    Returns X float32 (C * n_per_class, 2) and y int64.
    """
    from sklearn.datasets import make_blobs
    centers = np.asarray(centers, dtype=np.float64)
    if centers.ndim != 2 or centers.shape[1] != 2:
        raise ValueError(f"centers must be a (C, 2) array, got shape {centers.shape}")
    state = seed if sklearn_seed else np.random.RandomState(rng(seed, "data").integers(2**32))
    X, y = make_blobs(n_samples=[n_per_class] * len(centers), centers=centers, cluster_std=std,
                      random_state=state)
    return torch.tensor(X, dtype=torch.float32), torch.tensor(y, dtype=torch.int64)


# -------------------------------------------------------------------------------------------- CLI

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flkit.datasets", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    imp = sub.add_parser("import", help="copy dataset files from a flat folder into the data root")
    imp.add_argument("src", help="folder with mnist/, fashion-mnist/ (svhn/, cifar10/, cifar100/) subfolders")
    imp.add_argument("--root", default=None, help="data root (default: $FLKIT_DATA, else <repo>/data)")
    st = sub.add_parser("status", help="say which datasets are present and verified")
    st.add_argument("--root", default=None)
    args = parser.parse_args(argv)
    try:
        if args.cmd == "import":
            print(f"data root: {data_root(args.root)}")
            for line in import_files(args.src, args.root):
                print(line)
        else:
            print(f"data root: {data_root(args.root)}")
            for name in NAMES:
                print(f"{name:14s} {'ok' if available(name, args.root) else 'missing'}")
    except (DatasetNotFoundError, DatasetCorruptError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
