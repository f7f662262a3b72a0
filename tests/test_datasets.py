"""flkit.datasets: every loader on small files in the exact on-disk formats, errors, import, synthetic data.

The generated files have other MD5s than the official ones, so the tests point torchvision's own
checksum tables (class attributes that flkit reads) at the generated files; the real loading code runs.
"""
from __future__ import annotations

import gzip
import os
import pickle
import subprocess
import sys
import tarfile

import numpy as np
import pytest
import torch
from torchvision import datasets as tvd

from flkit import datasets as ds
from flkit.datasets import DatasetCorruptError, DatasetNotFoundError

MNIST_TRAIN = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
MNIST_TEST = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Any download attempt by torchvision fails the test."""
    import torchvision.datasets.utils as tvu

    def fail(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")
    for attr in ("_urlretrieve", "_get_redirect_url", "download_file_from_google_drive"):
        monkeypatch.setattr(tvu, attr, fail)
    monkeypatch.setattr("urllib.request.urlopen", fail)


def images(n, c, h, w, seed):
    return np.random.default_rng(seed).integers(0, 256, (n, c, h, w), dtype=np.uint8)


def labels(n, k, seed):
    return np.random.default_rng(seed + 1).permutation(np.arange(n) % k)  # every class present


# ------------------------------------------------------------------------------- file writers

def write_idx(path, arr):
    """IDX (ubyte) file, gzipped: magic 0x0803 for 3-D images, 0x0801 for 1-D labels."""
    header = (0x0800 + arr.ndim).to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in arr.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + arr.astype(np.uint8).tobytes())


def make_mnist(root, monkeypatch, cls=tvd.MNIST, n=(12, 7)):
    raw = root / cls.__name__ / "raw"
    raw.mkdir(parents=True)
    data = {}
    for split, m, seed in (("train", n[0], 0), ("t10k", n[1], 1)):
        x, y = images(m, 1, 28, 28, seed)[:, 0], labels(m, 10, seed)
        write_idx(raw / f"{split}-images-idx3-ubyte.gz", x)
        write_idx(raw / f"{split}-labels-idx1-ubyte.gz", y)
        data[split] = (x, y)
    monkeypatch.setattr(cls, "resources", [(f, ds.md5(raw / f)) for f, _ in cls.resources])
    return raw, data


def make_cifar(root, monkeypatch, cls=tvd.CIFAR10, per_file=None):
    """CIFAR pickles in torchvision's layout under root; ``per_file``: images in every batch file (default: a
    few, different per file)."""
    folder = root / cls.base_folder
    folder.mkdir(parents=True)
    k = 10 if cls is tvd.CIFAR10 else 100
    key = "labels" if k == 10 else "fine_labels"
    names = [f"class{i}" for i in range(k)]
    xs, ys = {}, {}
    for split, files in (("train", cls.train_list), ("test", cls.test_list)):
        parts = []
        for j, (fname, _) in enumerate(files):
            m = per_file or (k + 3 if k == 100 else 4 + j)
            x, y = images(m, 3, 32, 32, 10 * j + len(split)), labels(m, k, 10 * j + len(split))
            with open(folder / fname, "wb") as f:  # rows: 1024 R, 1024 G, 1024 B values, as in the official files
                pickle.dump({"data": x.reshape(m, 3072), key: y.tolist(), "filenames": [""] * m}, f)
            parts.append((x, y))
        xs[split], ys[split] = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    with open(folder / cls.meta["filename"], "wb") as f:
        pickle.dump({cls.meta["key"]: names}, f)
    monkeypatch.setattr(cls, "train_list", [[f, ds.md5(folder / f)] for f, _ in cls.train_list])
    monkeypatch.setattr(cls, "test_list", [[f, ds.md5(folder / f)] for f, _ in cls.test_list])
    monkeypatch.setattr(cls, "meta", {**cls.meta, "md5": ds.md5(folder / cls.meta["filename"])})
    return folder, xs, ys, names


def make_svhn(root, monkeypatch):
    from scipy.io import savemat
    split_list = dict(tvd.SVHN.split_list)
    data = {}
    for split, m in (("train", 11), ("test", 6)):
        x, y = images(m, 3, 32, 32, m), labels(m, 10, m)
        fname = split_list[split][1]
        # official layout: X (32, 32, 3, N) uint8 (H, W, C, N); y (N, 1) with label 10 for digit 0
        savemat(root / fname, {"X": x.transpose(2, 3, 1, 0), "y": np.where(y == 0, 10, y).astype(np.uint8)[:, None]})
        split_list[split] = [split_list[split][0], fname, ds.md5(root / fname)]
        data[split] = (x, y)
    monkeypatch.setattr(tvd.SVHN, "split_list", split_list)
    return data


def make_cinic(root, per_class=2):
    from PIL import Image
    data = {}
    for s, split in enumerate(("train", "valid", "test")):
        xs, ys = [], []
        for y, c in enumerate(ds.CINIC_CLASSES):
            (root / "CINIC-10" / split / c).mkdir(parents=True)
            for i in range(per_class):
                x = images(1, 3, 32, 32, 100 * s + 10 * y + i)[0]
                path = root / "CINIC-10" / split / c / f"img-{i}.png"
                if y == 3 and i == 0:  # CINIC-10 has some grayscale images: loaded as RGB
                    Image.fromarray(x[0], mode="L").save(path)
                    x = np.repeat(x[:1], 3, axis=0)
                else:
                    Image.fromarray(x.transpose(1, 2, 0)).save(path)
                xs.append(x)
                ys.append(y)
        data[split] = (np.stack(xs), np.array(ys))
    return data


def check(d, name, x, y, classes, split="train"):
    xt, yt = (d.x_train, d.y_train) if split == "train" else (d.x_test, d.y_test)
    assert d.name == name and d.classes == list(classes) and d.num_classes == len(classes)
    assert xt.dtype == torch.uint8 and yt.dtype == torch.int64
    assert xt.shape == x.shape and xt.is_contiguous()
    assert torch.equal(xt, torch.from_numpy(x)) and torch.equal(yt, torch.from_numpy(y).long())


# ----------------------------------------------------------------------------------- loaders

@pytest.mark.parametrize("name,cls", [("mnist", tvd.MNIST), ("fashion-mnist", tvd.FashionMNIST)])
def test_mnist_like_from_idx_gz(tmp_path, monkeypatch, name, cls):
    _, data = make_mnist(tmp_path, monkeypatch, cls)
    classes = ds.DIGITS if name == "mnist" else cls.classes
    d = ds.load(name, tmp_path, as_uint8=True)
    check(d, name, data["train"][0][:, None], data["train"][1], classes)
    check(d, name, data["t10k"][0][:, None], data["t10k"][1], classes, "test")
    f = ds.load(name, tmp_path)  # second load reads the extracted files
    assert f.x_train.dtype == torch.float32 and 0 <= f.x_train.min() and f.x_train.max() <= 1
    assert torch.allclose(f.x_train * 255, d.x_train.float(), atol=1e-4)


def test_cifar10_from_pickles_and_from_archive(tmp_path, monkeypatch):
    folder, xs, ys, names = make_cifar(tmp_path, monkeypatch)
    d = ds.load("cifar10", tmp_path, as_uint8=True)
    assert d.x_train.shape == (4 + 5 + 6 + 7 + 8, 3, 32, 32)
    check(d, "cifar10", xs["train"], ys["train"], names)
    check(d, "cifar10", xs["test"], ys["test"], names, "test")
    # only the official archive present: it is MD5-checked, then torchvision extracts it (no network)
    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    for p in folder.iterdir():
        p.unlink()
    folder.rmdir()
    monkeypatch.setattr(tvd.CIFAR10, "tgz_md5", ds.md5(archive))
    d2 = ds.load("cifar10", tmp_path)
    assert folder.is_dir() and d2.x_train.dtype == torch.float32
    assert torch.equal((d2.x_train * 255).round().to(torch.uint8), d.x_train)


def test_cifar100_fine_labels(tmp_path, monkeypatch):
    _, xs, ys, names = make_cifar(tmp_path, monkeypatch, tvd.CIFAR100)
    d = ds.load("cifar100", tmp_path, as_uint8=True)
    check(d, "cifar100", xs["train"], ys["train"], names)
    check(d, "cifar100", xs["test"], ys["test"], names, "test")
    assert d.num_classes == 100 and int(d.y_train.max()) == 99


def test_svhn_from_mat(tmp_path, monkeypatch):
    data = make_svhn(tmp_path, monkeypatch)
    d = ds.load("svhn", tmp_path, as_uint8=True)
    check(d, "svhn", *data["train"], ds.DIGITS)  # label 10 in the file became 0
    check(d, "svhn", *data["test"], ds.DIGITS, "test")
    f = ds.load("svhn", tmp_path)
    assert f.x_test.dtype == torch.float32 and float(f.x_test.max()) <= 1.0


def test_cinic10_from_png_folders(tmp_path):
    data = make_cinic(tmp_path)
    with pytest.warns(UserWarning, match="90000"):
        d = ds.load("cinic10", tmp_path, as_uint8=True)
    check(d, "cinic10", *data["train"], ds.CINIC_CLASSES)
    check(d, "cinic10", *data["test"], ds.CINIC_CLASSES, "test")  # valid/ is not used


def test_float_conversion_and_device(tmp_path, monkeypatch):
    make_mnist(tmp_path, monkeypatch)
    d = ds.load("mnist", tmp_path, device="cpu")
    assert d.x_train.dtype == torch.float32 and d.x_train.shape[1:] == (1, 28, 28)
    m = d.to("meta")  # moves every tensor, keeps the rest
    assert all(t.device.type == "meta" for t in (m.x_train, m.y_train, m.x_test, m.y_test))
    assert m.classes == d.classes and "mnist" in repr(d)


# ------------------------------------------------------------------------------------ errors

@pytest.mark.parametrize("name,expected", [
    ("mnist", ["train-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]),
    ("fashion-mnist", ["train-labels-idx1-ubyte.gz"]),
    ("cifar10", ["data_batch_1", "test_batch", "cifar-10-python.tar.gz"]),
    ("cifar100", ["train", "meta", "cifar-100-python.tar.gz"]),
    ("svhn", ["train_32x32.mat", "test_32x32.mat"]),
    ("cinic10", ["train/", "test/"]),
])
def test_missing_files_say_what_where_how(tmp_path, name, expected):
    with pytest.raises(DatasetNotFoundError) as err:
        ds.load(name, tmp_path)
    msg = str(err.value)
    assert all(e in msg for e in expected) and str(tmp_path) in msg
    assert "FLKIT_DATA" in msg and "python -m flkit.datasets import" in msg
    assert not ds.available(name, tmp_path)
    assert sorted(os.listdir(tmp_path)) == []  # nothing was created, nothing downloaded


def test_corrupt_byte_raises(tmp_path, monkeypatch):
    raw, _ = make_mnist(tmp_path, monkeypatch)
    path = raw / "train-labels-idx1-ubyte.gz"
    good = ds.md5(path)
    blob = bytearray(path.read_bytes())
    blob[20] ^= 0xFF
    path.write_bytes(bytes(blob))
    with pytest.raises(DatasetCorruptError) as err:
        ds.load("mnist", tmp_path)
    assert path.name in str(err.value) and good in str(err.value) and ds.md5(path) in str(err.value)
    assert not (raw / "train-labels-idx1-ubyte").exists()  # nothing extracted from a corrupt archive


def test_wrong_md5_for_real_checksums(tmp_path, monkeypatch):
    """Generated files checked against torchvision's real MD5s: corrupt, never a download attempt."""
    with monkeypatch.context() as m:
        make_cifar(tmp_path, m)
        make_svhn(tmp_path, m)
    for name, fname, digest in (("cifar10", "data_batch_1", tvd.CIFAR10.train_list[0][1]),
                                ("svhn", "train_32x32.mat", tvd.SVHN.split_list["train"][2])):
        with pytest.raises(DatasetCorruptError, match=digest) as err:
            ds.load(name, tmp_path)
        assert fname in str(err.value)


def test_truncated_extracted_file_and_broken_png(tmp_path, monkeypatch):
    raw, _ = make_mnist(tmp_path, monkeypatch)
    ds.load("mnist", tmp_path)
    ext = raw / "train-images-idx3-ubyte"
    ext.write_bytes(ext.read_bytes()[:-5])
    with pytest.raises(DatasetCorruptError, match="train-images-idx3-ubyte"):
        ds.load("mnist", tmp_path)
    make_cinic(tmp_path, per_class=1)
    png = tmp_path / "CINIC-10" / "test" / "cat" / "img-0.png"
    png.write_bytes(png.read_bytes()[:30])
    with pytest.raises(DatasetCorruptError, match="img-0.png"), pytest.warns(UserWarning):
        ds.load("cinic10", tmp_path)


def test_bad_name_lists_names():
    with pytest.raises(ValueError) as err:
        ds.load("imagenet")
    assert all(n in str(err.value) for n in ds.NAMES)
    assert ds.canonical_name("FMNIST") == "fashion-mnist"


def test_data_root_precedence(tmp_path, monkeypatch, repo):
    monkeypatch.delenv("FLKIT_DATA", raising=False)
    assert ds.data_root() == repo / "data"
    monkeypatch.setenv("FLKIT_DATA", str(tmp_path))
    assert ds.data_root() == tmp_path
    assert ds.data_root(tmp_path / "x") == tmp_path / "x"
    with pytest.raises(DatasetNotFoundError, match=r"\$FLKIT_DATA"):
        ds.load("svhn")


# --------------------------------------------------------------------------------- normalize

def test_stats_and_normalize():
    assert ds.STATS["cifar100"] == ds.STATS["cifar10"] == ds.PAPER_STATS[("fedau", "cifar10")]
    assert ds.PAPER_STATS[("hics", "fashion-mnist")] == ((0.5,), (0.5,))
    assert set(ds.STATS) == {"svhn", "cifar10", "cifar100", "cinic10"}
    x = torch.rand(8, 3, 4, 4) * torch.tensor([1.0, 2.0, 3.0]).view(1, 3, 1, 1)
    mean, std = x.mean((0, 2, 3)), x.std((0, 2, 3))
    z = ds.normalize(x, mean.tolist(), std.tolist())
    assert torch.allclose(z.mean((0, 2, 3)), torch.zeros(3), atol=1e-5)
    u = torch.full((2, 1, 2, 2), 255, dtype=torch.uint8)
    assert torch.allclose(ds.normalize(u, (0.5,), (0.5,)), torch.ones(2, 1, 2, 2))
    with pytest.raises(ValueError, match="C = len"):
        ds.normalize(x, (0.5,), (0.5, 0.5))


# ---------------------------------------------------------------------- real data (integration)

@pytest.fixture(scope="module")
def imported(shared_data, tmp_path_factory):
    """The real MNIST / Fashion-MNIST imported through the CLI into a temporary data root."""
    root = tmp_path_factory.mktemp("data")
    out = subprocess.run([sys.executable, "-m", "flkit.datasets", "import", str(shared_data), "--root", str(root)],
                         capture_output=True, text=True, check=True, cwd=ds.REPO)
    assert out.stdout.count("copied") == 8
    return root


def test_import_is_idempotent(imported, shared_data):
    assert (imported / "MNIST" / "raw" / "train-images-idx3-ubyte").is_file()  # extracted at import
    log = ds.import_files(shared_data, imported)
    assert sum("already present (MD5 ok)" in line for line in log) == 8
    assert not any("copied" in line or "extracted" in line for line in log)


def test_import_svhn_and_cifar_archive(tmp_path, monkeypatch):
    gen, src, root = tmp_path / "gen", tmp_path / "src", tmp_path / "root"
    gen.mkdir()
    folder, xs, _, _ = make_cifar(gen, monkeypatch)
    (src / "cifar10").mkdir(parents=True)
    with tarfile.open(src / "cifar10" / "cifar-10-python.tar.gz", "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    monkeypatch.setattr(tvd.CIFAR10, "tgz_md5", ds.md5(src / "cifar10" / "cifar-10-python.tar.gz"))
    (src / "svhn").mkdir()
    data = make_svhn(src / "svhn", monkeypatch)
    log = ds.import_files(src, root)
    assert sum("copied" in line for line in log) == 3 and any("cifar10: extracted" in line for line in log)
    assert torch.equal(ds.load("cifar10", root, as_uint8=True).x_test, torch.from_numpy(xs["test"]))
    assert torch.equal(ds.load("svhn", root, as_uint8=True).y_train, torch.from_numpy(data["train"][1]).long())
    (src / "svhn" / "test_32x32.mat").write_bytes(b"broken")  # a corrupt source is never copied
    (root / "test_32x32.mat").unlink()
    with pytest.raises(DatasetCorruptError, match="test_32x32.mat"):
        ds.import_files(src, root)
    assert not (root / "test_32x32.mat").exists()


@pytest.mark.parametrize("name,train,test", [("mnist", MNIST_TRAIN, MNIST_TEST),
                                             ("fashion-mnist", [6000] * 10, [1000] * 10)])
def test_real_mnist_and_fashion_mnist(imported, name, train, test):
    d = ds.load(name, imported, as_uint8=True)
    assert d.x_train.shape == (60000, 1, 28, 28) and d.x_test.shape == (10000, 1, 28, 28)
    assert torch.bincount(d.y_train).tolist() == train and torch.bincount(d.y_test).tolist() == test
    assert d.num_classes == 10 and int(d.x_train.max()) == 255


# ---------------------------------------------------------------------------------- synthetic

def test_quadratic_clients():
    p = ds.quadratic_clients(10, 5, seed=0, heterogeneity=2.0, mu=0.5, L=8.0)
    assert p.A.dtype == p.b.dtype == torch.float64 and p.A.shape == p.b.shape == (10, 5)
    w = p.w_star
    assert torch.allclose(p.client_grads(w).sum(0), torch.zeros(5, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(p.f(w), p.f_star) and float(p.f_star) > 0  # heterogeneous: no common optimum
    assert p.L == pytest.approx(8.0) and 0.5 <= p.mu <= 8.0
    v = torch.randn(3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert (p.f(v) >= p.f_star).all() and p.client_losses(v).shape == (3, 10)
    vg = v.clone().requires_grad_()
    p.f(vg).sum().backward()
    assert torch.allclose(vg.grad, p.grad(v))
    q = ds.quadratic_clients(10, 5, seed=0, heterogeneity=2.0, mu=0.5, L=8.0)
    assert torch.equal(p.A, q.A) and torch.equal(p.b, q.b)
    h0 = ds.quadratic_clients(4, 3, seed=1, heterogeneity=0.0)
    assert torch.allclose(h0.client_grads(h0.w_star), torch.zeros(4, 3, dtype=torch.float64))


def test_logistic_data():
    X, y, w = ds.logistic_data(2000, 4, seed=3)
    assert X.shape == (2000, 4) and y.dtype == torch.int64 and set(y.tolist()) <= {0, 1}
    agree = ((X @ w > 0).long() == y).float().mean()
    assert agree > 0.7
    X2, y2, _ = ds.logistic_data(2000, 4, seed=3, w_star=w, deterministic=True, flip_prob=0.2)
    assert 0.7 < ((X2 @ w > 0).long() == y2).float().mean() < 0.9
    assert torch.equal(ds.logistic_data(50, 4, seed=3)[0], ds.logistic_data(50, 4, seed=3)[0])


def test_blobs_2d():
    centers = [(1, 1), (2, 3), (2.3, 1.5)]
    X, y = ds.blobs_2d(centers, 100, 0.1, seed=11)
    assert X.shape == (300, 2) and X.dtype == torch.float32 and torch.bincount(y).tolist() == [100] * 3
    assert torch.allclose(X[y == 1].mean(0), torch.tensor([2.0, 3.0]), atol=0.05)
    X2, _ = ds.blobs_2d(centers, 100, 0.1, seed=11)
    X3, _ = ds.blobs_2d(centers, 100, 0.1, seed=12)
    assert torch.equal(X, X2) and not torch.equal(X, X3)
    from sklearn.datasets import make_blobs
    Xs, ys = make_blobs(n_samples=300, centers=np.array(centers), cluster_std=0.1, random_state=11)
    Xa, ya = ds.blobs_2d(centers, 100, 0.1, seed=11, sklearn_seed=True)  # the authors' points
    assert np.allclose(Xa.numpy(), Xs, atol=1e-6) and np.array_equal(ya.numpy(), ys)
