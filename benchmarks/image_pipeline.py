#!/usr/bin/env python3
"""Image pipeline: CPU per image of tsock's train pipeline against the decode floor and torchvision.

One invocation, the same files for every measurement (an ImageNet-shaped tree written by
tsock-mkdataset, cropped from the photographs under /usr/share/backgrounds, which the setup
step installs (mate-backgrounds) when missing or else loudly replaces by synthetic files; or
--root):

  (a) floor        tsock-bench-decode: plain TurboJPEG full-size decode to RGB of each file,
                   from memory, one thread (thread CPU time per image); beside it the same
                   process's tsock_pipeline_load with 1 worker (train preset).
  (b) tsock        tsock-producer --dataset imagenet (train preset: RandomResizedCrop(224) +
                   horizontal flip) with --workers N feeding one tsock-consume --content
                   images; CPU per image = the producer's final cpu_s / samples (everything
                   the process spent, index build included; nothing subtracted). The consumer's
                   own CPU is reported beside it, and the pipeline's decode_s (the workers'
                   wall time in decode + augment, summed; it counts time spent waiting for a
                   core, so on a busy machine it exceeds the CPU time).
  (c) torchvision  ImageFolder + DataLoader(num_workers=N, same batch size) with
                   RandomResizedCrop(224) + RandomHorizontalFlip() + PILToTensor() (uint8, the
                   same output as tsock), in a subprocess that measures getrusage SELF +
                   CHILDREN (the workers, which the DataLoader joins at the end of each epoch)
                   from just before ImageFolder is built to after the last epoch; the imports
                   are not counted.
  (d) scaling      tsock-producer images/s with --workers 1..N (N = os.cpu_count()), measured
                   by the consumer between its first and last batch.

Every measurement is repeated --repeat times (3), interleaved; medians are reported and the
ratios are computed from this run's medians. Targets (issue 4): (b) <= 1.25 x (a) per image;
(b) uses at least 3 x less CPU per image than (c). A missed target is printed, not an error:
the exit status is non-zero only when something failed to run.

    python3 benchmarks/image_pipeline.py [--images 800] [--repeat 3] [--root DIR]

Writes docs/benchmarks/image_pipeline.json (--out) and prints a table.

--mode shards compares the same photographs read from the folder and from WebDataset tar
shards (tsock-mkdataset --from-folder --format webdataset, --shard-samples per shard), in one
invocation, interleaved, --repeat times: tsock-producer --dataset imagenet against
--dataset webdataset --shuffle samples and --shuffle shards (--shard-window), each with
--workers N and one tsock-consume. Reported per source: the producer's CPU per image (its
final cpu_s / samples, index build included) and images/s (measured by the consumer). Target
(issue 19): shards cost no more CPU per image than folders. Writes
docs/benchmarks/image_pipeline_shards.json.
"""
import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import (add_tree_args, find_programs, git_commit, last_json,  # beside this script
                      machine, make_tree, warn_fallback)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(REPO, "build", "normal")

# Runs in a fresh python3: the torchvision baseline. argv: root workers batch epochs seed.
TORCHVISION_SCRIPT = r"""
import json, resource, sys, time
import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

root, workers, batch, epochs, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    int(sys.argv[4]), int(sys.argv[5])

def cpu():
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime

torch.manual_seed(seed)
s0, c0 = cpu()
w0 = time.monotonic()
tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
                         transforms.PILToTensor()])
ds = datasets.ImageFolder(root, transform=tf)
loader = DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers)
samples = 0
first = None
for epoch in range(epochs):
    for images, labels in loader:
        assert images.dtype == torch.uint8 and images.shape[1:] == (3, 224, 224)
        if first is None:
            first = time.monotonic()
        samples += images.shape[0]
wall = time.monotonic() - w0
del loader
s1, c1 = cpu()
print(json.dumps({"samples": samples, "wall_s": wall, "main_cpu_s": s1 - s0,
                  "workers_cpu_s": c1 - c0, "cpu_s": (s1 - s0) + (c1 - c0),
                  "images_per_s_after_first_batch": (samples - batch) / (time.monotonic() - first)
                  if samples > batch else None,
                  "torch": torch.__version__,
                  "torchvision": __import__("torchvision").__version__,
                  "pillow": __import__("PIL").__version__}))
"""


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_tree_args(ap)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=os.cpu_count(),
                    help="N for (b), (c) and the top of (d) (default: os.cpu_count())")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=2, help="epochs per run of (b), (c), (d)")
    ap.add_argument("--bin-dir", default=os.path.join(BUILD, "producer"))
    ap.add_argument("--bench-dir", default=os.path.join(BUILD, "benchmarks"))
    ap.add_argument("--out", default=os.path.join(REPO, "docs", "benchmarks",
                                                   "image_pipeline.json"))
    ap.add_argument("--skip-torchvision", action="store_true")
    ap.add_argument("--mode", choices=("floor", "shards"), default="floor",
                    help="floor (default): (a)-(d) above; shards: folder vs tar shards")
    ap.add_argument("--shard-samples", type=int, default=100,
                    help="--mode shards: samples per shard (100)")
    ap.add_argument("--shard-window", type=int, default=2,
                    help="--mode shards: shards shuffled together by --shuffle shards (2)")
    args = ap.parse_args()
    if args.mode == "shards" and args.out == os.path.join(REPO, "docs", "benchmarks",
                                                          "image_pipeline.json"):
        args.out = os.path.join(REPO, "docs", "benchmarks", "image_pipeline_shards.json")
    args.decode = os.path.join(args.bench_dir, "tsock-bench-decode")
    find_programs(ap, args, args.decode)
    if args.repeat < 1 or args.workers < 1 or args.epochs < 1:
        ap.error("--repeat, --workers and --epochs must be at least 1")
    return args


def run_floor(args, root):
    cmd = [args.decode, "--root", root, "--repeat", str(args.repeat), "--batch-size",
           str(args.batch_size)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"tsock-bench-decode failed ({r.returncode}): {r.stderr}")
    return json.loads(r.stdout), cmd


def run_tsock(args, root, workers, workdir, tag, source=None):
    """One producer + one consumer; returns the producer's final record and the consumer's.
    `source`: the dataset flags (default: --dataset imagenet --root ROOT)."""
    endpoint = f"ipc://{workdir}/{tag}.sock"
    stats = os.path.join(workdir, f"{tag}.jsonl")
    if source is None:
        source = ["--dataset", "imagenet", "--root", root]
    pcmd = [args.producer, *source, "--split", "train",
            "--workers", str(workers), "--batch-size", str(args.batch_size), "--epochs",
            str(args.epochs), "--endpoint", endpoint, "--wait-consumers", "1", "--stats-json",
            stats, "--quiet"]
    ccmd = [args.consume, "--endpoint", endpoint, "--content", "images", "--epochs",
            str(args.epochs), "--json", "--quiet", "--trace-times"]
    prod = subprocess.Popen(pcmd, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        c = subprocess.run(ccmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=1800)
        cres = last_json(c.stdout)
        if c.returncode != 0:
            raise RuntimeError(f"tsock-consume exit {c.returncode}: {cres.get('error')} "
                               f"{c.stderr}")
        _, perr = prod.communicate(timeout=120)
        if prod.returncode != 0:
            raise RuntimeError(f"tsock-producer exit {prod.returncode}: {perr}")
    finally:
        if prod.poll() is None:
            prod.send_signal(signal.SIGTERM)
            try:
                prod.wait(timeout=10)
            except subprocess.TimeoutExpired:
                prod.kill()
    with open(stats) as f:
        records = [json.loads(l) for l in f if l.strip()]
    final = records[-1]
    if final.get("type") != "final":
        raise RuntimeError("the producer's stats file has no final record")
    for key in ("duplicates", "missing", "label_errors", "index_errors", "layout_errors"):
        if cres.get(key):
            raise RuntimeError(f"tsock-consume: {key} = {cres[key]}")
    times = cres["batch_times_s"]
    span = times[-1] - times[0]
    pl = final["pipeline"]
    return {
        "workers": workers,
        "samples": final["samples"],
        "cpu_s": final["cpu_s"],
        "wall_s": final["wall_s"],
        "cpu_ms_per_image": 1e3 * final["cpu_s"] / final["samples"],
        "decode_s": pl["decode_s"],
        # decode_s is the workers' wall time inside decode+augment, summed: above the CPU
        # time when the workers wait for a core (a busy machine), so this share can pass 1.
        "decode_share_of_cpu": pl["decode_s"] / final["cpu_s"],
        "decode_ms_per_image": 1e3 * pl["decode_s"] / final["samples"],
        "read_s": pl["read_s"],
        "index_s": pl["index_s"],
        "read_mode": pl["read_mode"],
        "bad_files": pl["bad_files"],
        "consumer_cpu_s": cres["cpu_s"],
        "consumer_cpu_ms_per_image": 1e3 * cres["cpu_s"] / max(1, cres["samples"]),
        "images_per_s": (cres["samples"] - cres["batch_size"]) / span if span > 0 else None,
        "max_rss_bytes": final["max_rss_bytes"],
    }, pcmd, ccmd


def run_torchvision(args, root):
    cmd = [sys.executable, "-c", TORCHVISION_SCRIPT, root, str(args.workers),
           str(args.batch_size), str(args.epochs), "0"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise RuntimeError(f"torchvision baseline failed ({r.returncode}): {r.stderr[-3000:]}")
    res = last_json(r.stdout)
    # The whole subprocess (python start, imports, workers), as a cross-check.
    res["whole_process_cpu_s"] = (after.ru_utime + after.ru_stime) - (before.ru_utime +
                                                                      before.ru_stime)
    res["cpu_ms_per_image"] = 1e3 * res["cpu_s"] / res["samples"]
    return res


def med(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def make_shards(args, root, workdir):
    """The tree as shards (tsock-mkdataset --from-folder); returns (brace pattern, command)."""
    out = os.path.join(workdir, "shards")
    cmd = [args.mkdataset, out, "--from-folder", root, "--format", "webdataset",
           "--shard-samples", str(args.shard_samples), "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"tsock-mkdataset --format webdataset failed: {r.stderr}")
    return last_json(r.stdout), cmd


def main_shards(args, out):
    """--mode shards: folder vs shards in both shuffle orders, interleaved."""
    workdir = tempfile.mkdtemp(prefix="tsock-shards-bench-")
    os.chmod(workdir, 0o700)
    keys = ("cpu_ms_per_image", "images_per_s", "decode_ms_per_image", "read_s", "index_s",
            "wall_s", "consumer_cpu_ms_per_image")
    try:
        if args.root:
            root, out["dataset"] = args.root, {"root": args.root}
        else:
            root, summary, cmd = make_tree(args, workdir)
            out["dataset"] = {k: summary.get(k) for k in (
                "images", "classes", "files", "total_bytes", "mean_width", "mean_height",
                "mean_bytes", "source", "quality", "photos_fallback")}
            out["dataset"]["command"] = " ".join(cmd)
        made, cmd = make_shards(args, root, workdir)
        out["shards"] = {"shards": made["shards"], "samples": made["samples"],
                         "per_shard": args.shard_samples, "command": " ".join(cmd)}
        spec = made["pattern"]
        sources = {
            "folder": None,
            "shards_shuffle_samples": ["--dataset", "webdataset", "--shards", spec],
            "shards_shuffle_shards": ["--dataset", "webdataset", "--shards", spec, "--shuffle",
                                      "shards", "--shard-window", str(args.shard_window)],
        }
        runs = {k: [] for k in sources}
        commands = {}
        for n in range(args.repeat):  # interleaved: drift of the shared machine hits all
            for name, src in sources.items():
                res, pcmd, ccmd = run_tsock(args, root, args.workers, workdir, f"{name}-{n}",
                                            src)
                runs[name].append(res)
                commands[name] = " ".join(pcmd)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    out["results"] = {name: {**{k: med(r, k) for k in keys}, "read_mode": r[0]["read_mode"],
                             "cpu_ms_per_image_range": [min(x["cpu_ms_per_image"] for x in r),
                                                        max(x["cpu_ms_per_image"] for x in r)],
                             "producer_command": commands[name], "runs": r}
                      for name, r in runs.items()}
    f_ms = out["results"]["folder"]["cpu_ms_per_image"]
    out["targets"] = {f"{name}_cpu_over_folder": out["results"][name]["cpu_ms_per_image"] / f_ms
                      for name in sources if name != "folder"}
    out["targets"]["shards_no_more_cpu_than_folder"] = all(
        v <= 1.0 for k, v in out["targets"].items() if k.endswith("_over_folder"))
    # The same ratio per round (each round runs the three back to back), for the spread.
    for name in sources:
        if name != "folder":
            per_round = sorted(a["cpu_ms_per_image"] / b["cpu_ms_per_image"]
                               for a, b in zip(runs[name], runs["folder"]))
            out["targets"][f"{name}_cpu_over_folder_per_round"] = per_round
    out["machine"]["load_avg_at_end"] = os.getloadavg()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print(f"{out['shards']['samples']} images in {out['shards']['shards']} shards; "
          f"{args.workers} workers; medians of {args.repeat}")
    print(f"{'source':<28} {'CPU ms/image':>12} {'images/s':>10}")
    for name, r in out["results"].items():
        print(f"{name:<28} {r['cpu_ms_per_image']:>12.3f} {r['images_per_s'] or 0:>10.1f}")
    for k, v in out["targets"].items():
        shown = (v if isinstance(v, bool) else [round(x, 3) for x in v] if isinstance(v, list)
                 else round(v, 3))
        print(f"{k}: {shown}")
    print(f"written: {args.out}")
    warn_fallback(args)
    return 0


def main():
    args = parse_args()
    out = {"benchmark": "image_pipeline", "date_utc": time.strftime("%Y-%m-%d %H:%M",
                                                                   time.gmtime()),
           "machine": machine(),
           "commit": git_commit(),
           "config": {"repeat": args.repeat, "workers": args.workers,
                      "batch_size": args.batch_size, "epochs_per_run": args.epochs,
                      "mode": args.mode}}
    if args.mode == "shards":
        out["config"].update({"shard_samples": args.shard_samples,
                              "shard_window": args.shard_window})
        return main_shards(args, out)
    workdir = tempfile.mkdtemp(prefix="tsock-image-bench-")
    os.chmod(workdir, 0o700)
    try:
        if args.root:
            root, out["dataset"] = args.root, {"root": args.root}
        else:
            root, summary, cmd = make_tree(args, workdir)
            out["dataset"] = {k: summary.get(k) for k in (
                "images", "classes", "files", "total_bytes", "mean_width", "mean_height",
                "mean_bytes", "source", "quality", "photos_fallback")}
            out["dataset"]["command"] = " ".join(cmd)

        floor, cmd = run_floor(args, root)
        out["floor"] = floor
        out["floor"]["command"] = " ".join(cmd)
        out["dataset"].update({"decodable_jpegs": floor["decodable"],
                               "mean_bytes": floor["mean_bytes"],
                               "mean_width": floor["mean_width"],
                               "mean_height": floor["mean_height"]})

        scaling = {w: [] for w in range(1, args.workers + 1)}
        tv = []
        commands = {}
        for n in range(args.repeat):  # interleaved: drift of the shared machine hits all
            for w in scaling:
                res, pcmd, ccmd = run_tsock(args, root, w, workdir, f"w{w}-{n}")
                scaling[w].append(res)
                commands[w] = (" ".join(pcmd), " ".join(ccmd))
            if not args.skip_torchvision:
                tv.append(run_torchvision(args, root))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    keys = ("cpu_ms_per_image", "decode_ms_per_image", "decode_share_of_cpu", "images_per_s",
            "consumer_cpu_ms_per_image", "index_s", "read_s", "wall_s")
    out["tsock_scaling"] = [{"workers": w, **{k: med(runs, k) for k in keys},
                             "read_mode": runs[0]["read_mode"], "runs": runs}
                            for w, runs in scaling.items()]
    b = out["tsock_scaling"][-1]
    out["tsock"] = {k: b[k] for k in keys}
    out["tsock"].update({"workers": args.workers, "producer_command": commands[args.workers][0],
                         "consumer_command": commands[args.workers][1]})
    a_ms = floor["floor_cpu_ms_per_image"]
    b_ms = b["cpu_ms_per_image"]
    out["targets"] = {
        "b_over_a": b_ms / a_ms,
        "b_at_most_1.25x_a": b_ms <= 1.25 * a_ms,
        "in_process_pipeline_over_a": floor["pipeline_over_floor"],
    }
    if tv:
        out["torchvision"] = {k: med(tv, k) for k in ("cpu_ms_per_image", "cpu_s", "main_cpu_s",
                                                      "workers_cpu_s", "wall_s",
                                                      "whole_process_cpu_s",
                                                      "images_per_s_after_first_batch")}
        out["torchvision"].update({k: tv[0][k] for k in ("torch", "torchvision", "pillow")})
        out["torchvision"]["runs"] = tv
        c_ms = out["torchvision"]["cpu_ms_per_image"]
        out["targets"]["c_over_b"] = c_ms / b_ms
        out["targets"]["b_3x_less_than_c"] = c_ms >= 3 * b_ms
        out["targets"]["c_over_b_consumer_included"] = c_ms / (
            b_ms + b["consumer_cpu_ms_per_image"])
    out["machine"]["load_avg_at_end"] = os.getloadavg()

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")

    d = out["dataset"]
    print(f"files: {d.get('decodable_jpegs')} JPEGs, mean {d['mean_bytes'] / 1e3:.1f} kB, "
          f"{d['mean_width']:.0f} x {d['mean_height']:.0f}; {out['machine']['cpus']} CPUs "
          f"({out['machine']['cpu_model']}); medians of {args.repeat}")
    print(f"{'measurement':<52} {'CPU ms/image':>12}")
    print(f"{'(a) TurboJPEG full decode (floor)':<52} {a_ms:>12.3f}")
    print(f"{'    tsock_pipeline_load, 1 worker, in process':<52} "
          f"{floor['pipeline_cpu_ms_per_image']:>12.3f}")
    print(f"{f'(b) tsock-producer, {args.workers} workers':<52} {b_ms:>12.3f}")
    print(f"{'    its workers decoding (worker CPU, summed)':<52} "
          f"{b['decode_ms_per_image']:>12.3f}   ({100 * b['decode_share_of_cpu']:.0f} % of its CPU)")
    print(f"{'    tsock-consume beside it':<52} {b['consumer_cpu_ms_per_image']:>12.3f}")
    if tv:
        print(f"{f'(c) torchvision DataLoader, {args.workers} workers':<52} "
              f"{out['torchvision']['cpu_ms_per_image']:>12.3f}")
    print("(d) scaling: " + ", ".join(
        f"{s['workers']} workers {s['images_per_s']:.0f} img/s" for s in out["tsock_scaling"]))
    t = out["targets"]
    print(f"target (b) <= 1.25 x (a): (b)/(a) = {t['b_over_a']:.2f} -> "
          f"{'holds' if t['b_at_most_1.25x_a'] else 'MISSED'}")
    if tv:
        print(f"target (c) >= 3 x (b):    (c)/(b) = {t['c_over_b']:.2f} -> "
              f"{'holds' if t['b_3x_less_than_c'] else 'MISSED'}")
    print(f"written: {args.out}")
    warn_fallback(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
