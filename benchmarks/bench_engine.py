"""Throughput of flkit.engine.local_train: vectorized paths vs. a per-model loop vs. a hardware proxy.

    python benchmarks/bench_engine.py --quick                  # CPU smoke run (~1-2 min on 2 cores)
    python benchmarks/bench_engine.py --out results/bench.csv  # CUDA: M up to 2500, fp32 and bf16

Paths, all on synthetic data resident on the device (see benchmarks/README.md):
  grouped     local_train(vectorized="grouped"): grouped conv + baddbmm, autograd over the summed losses
  vmap        local_train(vectorized="vmap"): torch.func.vmap(functional_call) forward, one autograd backward
  sequential  local_train(vectorized=False): nn.Module copy + torch.optim per model, one after another;
              timed on at most --seq-cap models, its per-model throughput does not depend on M
  proxy       one model, one optimiser, trained on the concatenated M*B batch for the same number
              of steps: what the hardware does with the same arithmetic and no per-model structure
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from flkit import engine as E  # noqa: E402
from flkit import models  # noqa: E402

# model -> local-training config of its authors' code (IBM/fedau@6e9cce9 config.py;
# CityChan/HiCS-FL@25f309d configs/CIFAR10/*.json, client/client_base.py)
CONFIGS = {
    "fedau_cifar10": dict(batch=16, steps=5, train=dict(lr=0.1)),                              # FedAU: SGD, I=5
    # FedAU chapter's stand-in
    "fedau_fmnist": dict(batch=16, steps=5, train=dict(lr=0.1), shape=(1, 28, 28)),
    "hics_cifar10": dict(batch=64, steps=5, train=dict(lr=1e-3, opt="adam", prox_mu=0.5)),    # HiCS: Adam+prox
}


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, min_time: float, max_reps: int = 20) -> float:
    """Seconds per call after one warm-up call: repeat until min_time has passed (at least once;
    only once when the warm-up alone took over 20 s)."""
    start = time.perf_counter()
    fn()
    sync(device)
    if time.perf_counter() - start > 20:
        max_reps = 1
    reps, start = 0, time.perf_counter()
    while True:
        fn()
        reps += 1
        sync(device)
        elapsed = time.perf_counter() - start
        if elapsed >= min_time or reps >= max_reps:
            return elapsed / reps


def proxy_step_fn(model, x, y, M, B, S, train, amp, device):
    """One model trained with torch.optim on the M*B batch for S steps (the hardware-limit proxy)."""
    net = models.build(model).to(device)
    groups = net.parameters()
    opt = (torch.optim.Adam(groups, lr=train["lr"]) if train.get("opt") == "adam"
           else torch.optim.SGD(groups, lr=train["lr"]))
    idx = torch.randint(0, len(x), (S, M * B), device=device)

    def run():
        for s in range(S):
            with torch.autocast(device.type, dtype=amp) if amp else torch.enable_grad():
                loss = torch.nn.functional.cross_entropy(net(x[idx[s]]).float(), y[idx[s]])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return run


def measure(model, M, path, x, y, amp, cfg, device):
    B, S = cfg["batch"], cfg["steps"]
    if path == "proxy":
        return proxy_step_fn(model, x, y, M, B, S, cfg["train"], amp, device)
    net = models.build(model).to(device)
    params = E.stack(net, M)
    batches = torch.randint(0, len(x), (M, S, B), device=device)
    vec = {"grouped": "grouped", "vmap": "vmap", "sequential": False}[path]
    return lambda: E.local_train(net, params, x, y, batches, vectorized=vec, autocast_dtype=amp, **cfg["train"])


def _parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--models", default=",".join(CONFIGS))
    ap.add_argument("--M", default=None,
                    help="comma-separated model counts (default CUDA 25,100,400,1600,2500; CPU 4,16)")
    ap.add_argument("--amp", default=None, choices=["fp32", "bf16", "both"],
                    help="precision (default: both on CUDA, fp32 on CPU); bf16 = autocast, fp32 master weights")
    ap.add_argument("--paths", default="grouped,vmap,sequential,proxy")
    ap.add_argument("--seq-cap", type=int, default=25, help="most models the sequential loop is timed on")
    ap.add_argument("--min-time", type=float, default=None, help="seconds of timed calls per measurement")
    ap.add_argument("--budget", type=float, default=None, help="stop starting new measurements after this many s")
    ap.add_argument("--steps", type=int, default=None, help="local steps per call (default 5; 2 with --quick on CPU)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch CPU threads (default: torch's choice; 1 with --quick on CPU)")
    ap.add_argument("--quick", action="store_true", help="small run: CPU M=4,16 and 2 steps; CUDA M=25,400")
    ap.add_argument("--out", default=None, help="CSV file to write")
    args = ap.parse_args(argv)
    unknown = sorted(set(args.models.split(",")) - set(CONFIGS))
    if unknown:
        ap.error(f"--models: unknown {unknown}; choose from {sorted(CONFIGS)}")
    return args


def main(argv=None):
    args = _parse(argv)

    from flkit.seeding import resolve_device
    device = resolve_device(args.device)
    cuda = device.type == "cuda"
    if args.threads or (args.quick and not cuda):  # --quick on a shared CPU: 1 thread times more steadily
        torch.set_num_threads(args.threads or 1)
    if cuda:
        torch.backends.cudnn.benchmark = True
    Ms = [int(m) for m in args.M.split(",")] if args.M else ([25, 100, 400, 1600, 2500] if cuda else [4, 16])
    if args.quick and not args.M:
        Ms = [25, 400] if cuda else [4, 16]
    amp = args.amp or ("both" if cuda else "fp32")
    amps = {"fp32": [None], "bf16": [torch.bfloat16], "both": [None, torch.bfloat16]}[amp]
    min_time = args.min_time if args.min_time is not None else (0.5 if cuda else (0.2 if args.quick else 1.0))
    budget = args.budget if args.budget is not None else (420 if cuda else (110 if args.quick else 600))
    n_steps = args.steps or (2 if args.quick and not cuda else 5)
    seq_cap = min(args.seq_cap, 4) if (args.quick and not cuda) else args.seq_cap
    paths = args.paths.split(",")
    torch.manual_seed(0)
    y = torch.randint(0, 10, (8192,), device=device)

    t_start, rows = time.perf_counter(), []
    header = ["model", "precision", "M", "B", "S", "grouped", "vmap", "sequential", "proxy", "vec/seq", "vec/proxy",
              "vec_GiB", "note"]
    print(f"device: {torch.cuda.get_device_name(device) if cuda else 'cpu'} ({torch.get_num_threads()} threads), "
          f"torch {torch.__version__}; samples/s = M*B*S / time of one local_train call")
    for model in args.models.split(","):
        cfg = dict(CONFIGS[model], steps=n_steps)
        x = torch.randn(8192, *cfg.pop("shape", (3, 32, 32)), device=device)       # data of the model's shape
        auto_path = "grouped" if E.supports_grouped(models.build(model)) else "vmap"
        for amp in amps:
            prec = "bf16" if amp else "fp32"
            seq_rate = None
            for M in Ms:
                row = dict(model=model, precision=prec, M=M, B=cfg["batch"], S=cfg["steps"], note="")
                for path in paths:
                    if time.perf_counter() - t_start > budget:
                        row["note"] += " budget-skip"
                        continue
                    if path == "sequential" and seq_rate is not None:
                        row[path] = seq_rate  # independent of M: measured once per model/precision
                        continue
                    m_run = min(M, seq_cap) if path == "sequential" else M
                    if cuda:
                        torch.cuda.reset_peak_memory_stats(device)
                    try:
                        fn = measure(model, m_run, path, x, y, amp, cfg, device)
                        sec = timed(fn, device, min_time, max_reps=3 if path == "sequential" else 20)
                        row[path] = m_run * cfg["batch"] * cfg["steps"] / sec
                        if cuda and path in ("grouped", "vmap"):
                            peak = torch.cuda.max_memory_allocated(device) / 2**30
                            row["vec_GiB"] = max(row.get("vec_GiB") or 0.0, peak)
                        if path == "sequential":
                            seq_rate = row[path]
                            row["note"] += f" seq timed on {m_run}"
                    except torch.OutOfMemoryError:
                        row["note"] += f" {path}:OOM"
                    except RuntimeError as e:  # e.g. a cuDNN limit on very wide grouped convolutions
                        row["note"] += f" {path}:error"
                        print(f"[{model} M={M} {prec} {path}] {str(e).splitlines()[0][:200]}", file=sys.stderr)
                    finally:
                        fn = None
                        if cuda:
                            torch.cuda.empty_cache()
                vec = row.get(auto_path)  # the path local_train(vectorized=True) picks for this model
                row["vec/seq"] = vec / row["sequential"] if vec and row.get("sequential") else None
                row["vec/proxy"] = vec / row["proxy"] if vec and row.get("proxy") else None
                row["note"] = row["note"].strip()
                rows.append(row)
                print(format_row(row, header, first=len(rows) == 1), flush=True)

    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=header + ["device"])
            w.writeheader()
            for r in rows:
                w.writerow({**{k: r.get(k) for k in header}, "device": str(device)})
        print(f"wrote {args.out}")
    print(f"total {time.perf_counter() - t_start:.0f} s; vec = the path vectorized=True picks (grouped for these "
          f"models); sequential is extrapolated from its per-model rate on at most {seq_cap} models")


def readable(df):
    """The results `df` (rows as written by --out) for reading: throughputs in samples/s with thousands
    separators, ratios and GiB to two and one digits, and "n/a" with the reason (out of memory, the time
    budget, an error) where a path has no measurement."""
    def reason(note) -> str:
        note = note if isinstance(note, str) else ""
        why = ("out of memory" if "OOM" in note else "time budget" if "budget" in note
               else "error" if "error" in note else "")
        return f"n/a ({why})" if why else "n/a"
    out = df.copy().astype(object)
    digits = {"vec/seq": "{:.1f}x", "vec/proxy": "{:.2f}x", "vec_GiB": "{:.1f}"}
    for col in ("grouped", "vmap", "sequential", "proxy", "vec/seq", "vec/proxy", "vec_GiB"):
        if col in df:
            out[col] = [digits.get(col, "{:,.0f}").format(v) if v == v and v is not None else reason(n)
                        for v, n in zip(df[col], df.get("note", [""] * len(df)))]
    if "note" in df:
        out["note"] = df["note"].fillna("")
    return out.style.hide(axis="index")


def format_row(row, header, first=False):
    def fmt(k):
        v = row.get(k)
        if v is None:
            return "-"
        if k in ("vec/seq", "vec/proxy"):
            return f"{v:.2f}x"
        if k == "vec_GiB":
            return f"{v:.1f}"
        return f"{v:,.0f}" if isinstance(v, float) else str(v)
    widths = [14, 9, 5, 3, 2, 10, 10, 10, 10, 8, 9, 7, 0]
    line = " ".join(f"{fmt(k):>{w}}" if w else fmt(k) for k, w in zip(header, widths))
    if first:
        head = " ".join(f"{k:>{w}}" if w else k for k, w in zip(header, widths))
        return head + "\n" + line
    return line


if __name__ == "__main__":
    main()
