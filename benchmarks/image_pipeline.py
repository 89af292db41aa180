#!/usr/bin/env python3
"""Image pipeline: CPU per image of tsock's presets against the decode floor, and how it scales.

One invocation, the same files for every measurement (an ImageNet-shaped tree written by
tsock-mkdataset, cropped from the photographs under /usr/share/backgrounds, which the setup
step installs (mate-backgrounds) when missing or else loudly replaces by synthetic files; or
--root, an existing ImageFolder tree):

  (a) floor        tsock-bench-decode: plain TurboJPEG full-size decode to RGB of each file,
                   from memory, one thread (thread CPU time per image); beside it the same
                   process's tsock_pipeline_load with 1 worker (train preset).
  (b) tsock        tsock-producer --dataset imagenet --split train|val (train:
                   RandomResizedCrop(224) + horizontal flip; val: Resize(256) + CenterCrop(224))
                   with --workers N feeding one tsock-consume --content images --no-digest;
                   CPU per image = the producer's final cpu_s / samples (everything the process
                   spent, index build included; nothing subtracted). Beside it: the CPU per
                   stage (file reads, codec = entropy decoding + IDCT, colour + resampling,
                   publishing; thread CPU time, docs/stats.md) and per thread kind (the main
                   thread: the serial reader + publisher; the decode workers; the service and
                   ZeroMQ threads), and the consumer's own CPU.
  (c) torchvision  ImageFolder + DataLoader(num_workers=N, same batch size) with
                   RandomResizedCrop(224) + RandomHorizontalFlip() + PILToTensor() (uint8, the
                   same output as tsock), in a subprocess that measures getrusage SELF +
                   CHILDREN from just before ImageFolder is built to after the last epoch; the
                   imports are not counted. --skip-torchvision leaves it out.
  (d) scaling      producer images/s for every --workers count (1..N, or a list such as
                   1,2,4,8,16), measured by the consumer between its first and last batch, and
                   an Amdahl model fitted to the 1-worker run: the main thread's CPU per image
                   is serial, the workers' divides among them; X(N) = 1 / (s + p / N), capped
                   by the cores the threads need; predictions for 16, 32 and 64 cores.
                   A run with W workers reads max(epochs, epochs * W / 2) epochs.

Every measurement is repeated --repeat times (3), interleaved: each round runs the floor (a)
once, then every producer run, then (c). Medians are reported and the ratios are computed
from this run's medians; beside them, each round's (b) over the same round's (a), the median
of those ratios (a shared machine's load drifts between rounds, and both sides of a round
see the same). The in-process tsock_pipeline_load line comes from one more run of (a) before
the rounds, with --repeat passes in one process: its median is a pass with entry points.
Targets (issue 21): train <= 0.75 x (a), val <= 1.0 x (a), (b) per image at the largest worker
count, from the medians. A missed target is printed, not an error: the exit status is
non-zero only when something failed to run.

    python3 benchmarks/image_pipeline.py [--images 2000] [--repeat 3] [--root DIR]
        [--workers 1,2,4] [--presets train,val] [--build-dir build/normal] [--skip-torchvision]

Writes docs/benchmarks/image_pipeline.json (--out) and prints a table.

--mode shards compares the same photographs read from the folder and from WebDataset tar
shards (tsock-mkdataset --from-folder --format webdataset, --shard-samples per shard), in one
invocation, interleaved, --repeat times: tsock-producer --dataset imagenet against
--dataset webdataset --shuffle samples and --shuffle shards (--shard-window), each with
--workers N and one tsock-consume. Reported per source: the producer's CPU per image (its
final cpu_s / samples, index build included) and images/s (measured by the consumer). Target
(issue 19): shards cost no more CPU per image than folders. Writes
docs/benchmarks/image_pipeline_shards.json.

--mode restarts measures what restart markers save (issue 21): the photograph tree as above,
and a copy of it with a restart marker every --restart-interval MCUs (tsock-mkdataset OUT
--from-folder TREE --restart-interval N --format folder: a lossless transcode, the same
pixels). Then, interleaved, --repeat times: the decode floor (a) on each tree and
tsock-producer's presets (b, the largest --workers count) on each tree. Reported: the medians,
each preset on each tree against the ORIGINAL tree's floor (the headline: issue 21's targets
are stated against the full decode of the files a user has) and against its own tree's floor,
how much bigger the files became, and the share of the images the producer decoded from the
restart intervals under their crop alone (its final record's restart_windows / samples). Writes docs/benchmarks/image_pipeline_restarts.json.

--mode entry-points measures what the entry points into each file's Huffman data save (issue
21; --entry-points-mb, docs/pipeline.md): per round, interleaved, --repeat times, the decode
floor (a) and, per preset, two producer runs of --epochs epochs at the largest --workers count,
without entry points (--entry-points-mb 0) and with them (the default). Besides each whole
run's CPU per image, the CPU per image of what it decoded after its first epoch: the
difference of the process's CPU (cpu_s) between its first interval record (every 0.05 s) by
which the workers had decoded a whole epoch (decoded_cpu) and its final record, over the
images decoded in between. That is what each epoch of a training run costs once start-up is
paid and the first epoch has learnt every file's entry points. Reported against the floor's
median, and each round against its own round's floor (the median of those ratios). Writes
docs/benchmarks/image_pipeline_entry_points.json.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import (add_tree_args, find_programs, git_commit, last_json,  # beside this script
                      machine, make_tree, run_torchvision_baseline, serve_and_consume,
                      warn_fallback)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(REPO, "build", "normal")

# The torchvision baseline's transform (benchlib.run_torchvision): the same crop and flip,
# uint8 out.
TORCHVISION_TRANSFORM = """
tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
                         transforms.PILToTensor()])
"""


def worker_list(text):
    """--workers: "N" (1, 2, ..., N) or a comma-separated list ("1,2,4,8,16")."""
    try:
        if "," in text:
            ws = sorted({int(x) for x in text.split(",") if x.strip()})
        else:
            ws = list(range(1, int(text) + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a worker count or list: {text!r}")
    if not ws or ws[0] < 1:
        raise argparse.ArgumentTypeError("worker counts must be at least 1")
    return ws


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # 2,000 images: issue 21's measure. The producer's fixed costs (its ring reserved, faulted
    # in and given back; start-up) weigh per image inversely to the images a run decodes.
    add_tree_args(ap, images=2000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=worker_list, default=worker_list(str(os.cpu_count())),
                    help="worker counts for (b) and (d): N means 1..N, or a list such as "
                         "1,2,4,8,16 (default: 1..os.cpu_count()); (b) and (c) use the largest")
    ap.add_argument("--presets", default="train,val",
                    help="the producer's presets measured (train, val or both; default both)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=2,
                    help="epochs per run of (b) and (c); a run with W workers reads "
                         "max(epochs, epochs * W / 2) epochs, so that every run lasts about "
                         "as long")
    ap.add_argument("--build-dir", default=BUILD,
                    help="a build of this project: its producer/ and benchmarks/ folders give "
                         "the programs (default: build/normal)")
    ap.add_argument("--bin-dir", help="tsock-producer, tsock-consume, tsock-mkdataset "
                                      "(default: BUILD_DIR/producer)")
    ap.add_argument("--bench-dir", help="tsock-bench-decode (default: BUILD_DIR/benchmarks)")
    ap.add_argument("--out", default=os.path.join(REPO, "docs", "benchmarks",
                                                   "image_pipeline.json"))
    ap.add_argument("--skip-torchvision", action="store_true")
    ap.add_argument("--mode", choices=("floor", "shards", "restarts", "entry-points"),
                    default="floor",
                    help="floor (default): (a)-(d) above; shards: folder vs tar shards; "
                         "restarts: the tree vs a copy with restart markers; entry-points: "
                         "the presets with and without entry points, and from epoch 2 on")
    ap.add_argument("--restart-interval", type=int, default=1,
                    help="--mode restarts: MCUs per restart interval of the copy (1)")
    ap.add_argument("--shard-samples", type=int, default=100,
                    help="--mode shards: samples per shard (100)")
    ap.add_argument("--shard-window", type=int, default=2,
                    help="--mode shards: shards shuffled together by --shuffle shards (2)")
    args = ap.parse_args()
    if args.mode != "floor" and args.out == os.path.join(REPO, "docs", "benchmarks",
                                                         "image_pipeline.json"):
        args.out = os.path.join(REPO, "docs", "benchmarks",
                                f"image_pipeline_{args.mode.replace('-', '_')}.json")
    if not 1 <= args.restart_interval <= 65535:
        ap.error("--restart-interval: MCUs per restart interval, 1..65535")
    args.bin_dir = args.bin_dir or os.path.join(args.build_dir, "producer")
    args.bench_dir = args.bench_dir or os.path.join(args.build_dir, "benchmarks")
    args.decode = os.path.join(args.bench_dir, "tsock-bench-decode")
    args.presets = [p.strip() for p in args.presets.split(",") if p.strip()]
    if not args.presets or any(p not in ("train", "val") for p in args.presets):
        ap.error("--presets: train, val or train,val")
    if args.root and not os.path.isdir(args.root):
        ap.error(f"--root {args.root}: not a directory (an ImageFolder tree: ROOT/<class>/<file>)")
    find_programs(ap, args, args.decode)
    if args.repeat < 1 or args.epochs < 1:
        ap.error("--repeat and --epochs must be at least 1")
    return args


def run_floor(args, root, repeat=None):
    cmd = [args.decode, "--root", root, "--repeat", str(repeat or args.repeat), "--batch-size",
           str(args.batch_size)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"tsock-bench-decode failed ({r.returncode}): {r.stderr}")
    return json.loads(r.stdout), cmd


def epochs_for(args, workers):
    return max(args.epochs, args.epochs * workers // 2)


def after_first_epoch(stats, final):
    """The CPU per image of what a run decoded after its first epoch: from the producer's first
    interval record by which it had decoded a whole epoch (decoded_cpu, which counts decodes as
    they finish, not publications, which trail them by up to the ring's slots) to its final
    record. None when no interval record came after the first epoch."""
    with open(stats) as f:
        records = [json.loads(line) for line in f if line.strip()]
    epoch = final["dataset_samples"]
    for rec in records:
        if rec.get("type") == "interval" and rec.get("decoded_cpu", 0) >= epoch:
            n = final["pipeline"]["decoded_cpu"] - rec["decoded_cpu"]
            return 1e3 * (final["cpu_s"] - rec["cpu_s"]) / n if n > 0 else None
    return None


def run_tsock(args, root, preset, workers, workdir, tag, source=None, extra=(), epochs=None,
              steady=False):
    """One producer + one consumer; returns the figures of the producer's final record and the
    consumer's. The consumer checks ids, labels and coverage but reads no image bytes
    (--no-digest), so that it never limits the producer's rate. `source`: the dataset flags
    (default: --dataset imagenet --root ROOT); `extra`: more producer flags; `epochs`: the
    run's epochs (default: epochs_for); `steady`: interval records every 0.05 s, for the CPU
    per image after the first epoch (after_first_epoch)."""
    endpoint = f"ipc://{workdir}/{tag}.sock"
    stats = os.path.join(workdir, f"{tag}.jsonl")
    epochs = epochs or epochs_for(args, workers)
    if source is None:
        source = ["--dataset", "imagenet", "--root", root]
    pcmd = [args.producer, *source, "--split", preset,
            "--workers", str(workers), "--batch-size", str(args.batch_size), "--epochs",
            str(epochs), "--endpoint", endpoint, "--wait-consumers", "1", "--stats-json",
            stats, "--quiet", *extra, *(["--stats-interval", "0.05"] if steady else [])]
    ccmd = [args.consume, "--endpoint", endpoint, "--content", "images", "--no-digest",
            "--epochs", str(epochs), "--json", "--quiet", "--trace-times"]
    final, c = serve_and_consume(pcmd, ccmd, stats)
    cres = last_json(c.stdout)
    for key in ("duplicates", "missing", "label_errors", "index_errors", "layout_errors"):
        if cres.get(key):
            raise RuntimeError(f"tsock-consume: {key} = {cres[key]}")
    times = cres["batch_times_s"]
    span = times[-1] - times[0]
    pl = final["pipeline"]
    th = final.get("threads_cpu_s", {})
    n = final["samples"]
    per = lambda x: 1e3 * x / n if x is not None else None  # noqa: E731  ms per image
    # The main thread is the serial part: the pipeline's driving thread (reads, handing the
    # files to the workers), publishing, reporting. The index build runs on it before the
    # first batch and is left out (index_s: its wall time, on a core of its own).
    main_s = th.get("main")
    serial_s = max(0.0, main_s - pl["index_s"]) if main_s is not None else None
    return {
        "preset": preset,
        "workers": workers,
        "epochs": epochs,
        "after_first_epoch_cpu_ms_per_image": after_first_epoch(stats, final) if steady else None,
        "samples": n,
        "cpu_s": final["cpu_s"],
        "wall_s": final["wall_s"],
        "cpu_ms_per_image": per(final["cpu_s"]),
        "decode_s": pl["decode_s"],
        # decode_s is the workers' thread CPU inside decode+augment, summed.
        "decode_share_of_cpu": pl["decode_s"] / final["cpu_s"],
        "decode_ms_per_image": per(pl["decode_s"]),
        "stage_cpu_ms_per_image": {
            "read": per(pl.get("read_cpu_s")),
            "codec": per(pl.get("codec_cpu_s")),
            "resample": per(pl.get("resample_cpu_s")),
            "publish": per(final.get("publish_cpu_s")),
        },
        "thread_cpu_ms_per_image": {
            "main_serial": per(serial_s),
            "driver": per(pl.get("driver_cpu_s")),
            "decode_workers": per(th.get("decode_workers")),
            "service": per(th.get("service")),
            "zmq": per(th.get("zmq")),
            "other": per(th.get("other")),
        },
        "read_s": pl["read_s"],
        "index_s": pl["index_s"],
        "read_mode": pl["read_mode"],
        "bad_files": pl["bad_files"],
        # The share of the images decoded from the restart intervals under their crop alone
        # (None: a build before restart-marker decoding).
        "restart_window_share": (pl["restart_windows"] / n if "restart_windows" in pl
                                 else None),
        # The share of the images whose decode started at entry points learnt in an earlier
        # epoch, and the memory those held at the end (None: a build before entry points).
        "entry_jump_share": pl["entry_jumps"] / n if "entry_jumps" in pl else None,
        "entry_point_bytes": pl.get("entry_point_bytes"),
        "consumer_cpu_s": cres["cpu_s"],
        "consumer_cpu_ms_per_image": 1e3 * cres["cpu_s"] / max(1, cres["samples"]),
        "images_per_s": (cres["samples"] - cres["batch_size"]) / span if span > 0 else None,
        "max_rss_bytes": final["max_rss_bytes"],
    }, pcmd, ccmd


def run_torchvision(args, root, workers):
    res = run_torchvision_baseline(TORCHVISION_TRANSFORM, root, workers, args.batch_size,
                                   args.epochs)
    if res["dtype"] not in (None, "torch.uint8"):
        raise RuntimeError(f"torchvision baseline: {res['dtype']} batches, uint8 expected")
    return res


def med(runs, key, sub=None):
    vals = [(r[key] if sub is None else r[key][sub]) for r in runs]
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


# Core counts the scaling model predicts for (issue 21), beside every worker count measured.
MODEL_CORES = (16, 32, 64)


def amdahl(scaling):
    """Images/s against workers from the 1-worker run's medians: the driving thread's CPU per
    image in the pipeline's loads (reads, hand-off) and in publishing is serial (it runs once
    per batch for all workers; thread CPU time, so a busy machine does not inflate it), the
    decode workers' CPU per image divides among the workers:
        X(N) = 1 / (s + p / N),  ceiling 1 / s.
    With N workers on N cores, the service and ZeroMQ threads and the consumer also need CPU;
    the cores bound X <= N / (s + p + service + zmq) is given beside it, and the prediction is
    the smaller of the two."""
    one = next((row for row in scaling if row["workers"] == 1), None)
    if one is None:
        return None
    t = one["thread_cpu_ms_per_image"]
    if t["driver"] is None or t["decode_workers"] is None:
        return None
    s = t["driver"] + (one["stage_cpu_ms_per_image"]["publish"] or 0.0)
    p = t["decode_workers"]
    aux = (t["service"] or 0.0) + (t["zmq"] or 0.0)

    def predict(n):
        amd = 1e3 / (s + p / n)
        cores = 1e3 * n / (s + p + aux)
        return {"workers": n, "amdahl_images_per_s": amd, "cores_bound_images_per_s": cores,
                "predicted_images_per_s": min(amd, cores)}

    measured = []
    for row in scaling:
        pr = predict(row["workers"])
        pr["measured_images_per_s"] = row["images_per_s"]
        pr["measured_over_predicted"] = (row["images_per_s"] / pr["predicted_images_per_s"]
                                         if row["images_per_s"] else None)
        measured.append(pr)
    return {"serial_ms_per_image": s, "parallel_ms_per_image": p,
            "service_and_zmq_ms_per_image": aux,
            "serial_fraction": s / (s + p),
            "ceiling_images_per_s": 1e3 / s if s > 0 else None,
            "at_measured_workers": measured,
            "predictions": [predict(n) for n in MODEL_CORES]}


def make_shards(args, root, workdir):
    """The tree as shards (tsock-mkdataset --from-folder); returns (brace pattern, command)."""
    out = os.path.join(workdir, "shards")
    cmd = [args.mkdataset, out, "--from-folder", root, "--format", "webdataset",
           "--shard-samples", str(args.shard_samples), "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"tsock-mkdataset --format webdataset failed: {r.stderr}")
    return last_json(r.stdout), cmd


def dataset_root(args, workdir, out):
    """The tree measured: --root, or one made in workdir; described in out["dataset"]."""
    if args.root:
        out["dataset"] = {"root": args.root}
        return args.root
    root, summary, cmd = make_tree(args, workdir)
    out["dataset"] = {k: summary.get(k) for k in (
        "images", "classes", "files", "total_bytes", "mean_width", "mean_height", "mean_bytes",
        "source", "quality", "photos_fallback")}
    out["dataset"]["command"] = " ".join(cmd)
    return root


def main_shards(args, out):
    """--mode shards: folder vs shards in both shuffle orders, interleaved."""
    workdir = tempfile.mkdtemp(prefix="tsock-shards-bench-")
    os.chmod(workdir, 0o700)
    keys = ("cpu_ms_per_image", "images_per_s", "decode_ms_per_image", "read_s", "index_s",
            "wall_s", "consumer_cpu_ms_per_image")
    try:
        root = dataset_root(args, workdir, out)
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
                res, pcmd, ccmd = run_tsock(args, root, "train", args.workers[-1], workdir,
                                            f"{name}-{n}", src)
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
          f"{args.workers[-1]} workers; medians of {args.repeat}")
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


def write_out(args, out, print_table):
    """Ends a mode's run: the load at the end, the JSON written to --out, the table printed
    (print_table(args, out)), the photographs' fallback said. Returns the exit status (0)."""
    out["machine"]["load_avg_at_end"] = os.getloadavg()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print_table(args, out)
    print(f"written: {args.out}")
    warn_fallback(args)
    return 0


def make_restart_copy(args, root, workdir):
    """A copy of the tree with restart markers (tsock-mkdataset --from-folder
    --restart-interval); returns (its path, tsock-mkdataset's JSON summary, the command)."""
    out = os.path.join(workdir, "restarts")
    cmd = [args.mkdataset, out, "--from-folder", root, "--restart-interval",
           str(args.restart_interval), "--format", "folder", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"tsock-mkdataset --restart-interval failed: {r.stderr}")
    return out, last_json(r.stdout), cmd


# The figures of a preset run reported as medians, and those nested per stage or thread.
PRESET_KEYS = ("cpu_ms_per_image", "decode_ms_per_image", "images_per_s", "wall_s",
               "consumer_cpu_ms_per_image", "restart_window_share")
PRESET_NESTED = ("stage_cpu_ms_per_image", "thread_cpu_ms_per_image")


def main_restarts(args, out):
    """--mode restarts: the tree and its restart-marked copy, floor and presets, interleaved."""
    workdir = tempfile.mkdtemp(prefix="tsock-restarts-bench-")
    os.chmod(workdir, 0o700)
    top = args.workers[-1]
    trees, floors, runs, commands = {}, {}, {}, {}
    try:
        trees["original"] = dataset_root(args, workdir, out)
        trees["restarts"], made, cmd = make_restart_copy(args, trees["original"], workdir)
        out["restart_copy"] = {
            "restart_interval": made["restart_interval"], "files": made["files"],
            "transcoded": made["transcoded"], "not_transcoded": made["not_transcoded"],
            "bytes": made["bytes"], "source_bytes": made["source_bytes"],
            "size_ratio": made["bytes"] / made["source_bytes"],
            "transcoded_size_ratio": made["transcoded_size_ratio"],
            "seconds": made["seconds"], "command": " ".join(cmd)}
        for n in range(args.repeat):  # interleaved, the trees' order alternating per round
            for tree in (("original", "restarts") if n % 2 == 0 else ("restarts", "original")):
                floor, fcmd = run_floor(args, trees[tree], repeat=1)
                floors.setdefault(tree, []).append(floor)
                commands[tree] = " ".join(fcmd)
                for preset in args.presets:
                    res, pcmd, _ = run_tsock(args, trees[tree], preset, top, workdir,
                                             f"{tree}-{preset}-{n}")
                    runs.setdefault((tree, preset), []).append(res)
                    commands[(tree, preset)] = " ".join(pcmd)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    floor_ms = {t: med(f, "floor_cpu_ms_per_image") for t, f in floors.items()}
    out["results"], out["targets"] = {}, {}
    limits = {"train": 0.75, "val": 1.0}  # issue 21
    for tree in trees:
        res = {"floor_cpu_ms_per_image": floor_ms[tree],
               "floor_runs": [f["floor_cpu_ms_per_image"] for f in floors[tree]],
               "mean_bytes": floors[tree][0]["mean_bytes"],
               "decodable": floors[tree][0]["decodable"],
               "floor_command": commands[tree], "presets": {}}
        for preset in args.presets:
            r = runs[(tree, preset)]
            row = {k: med(r, k) for k in PRESET_KEYS}
            row.update({k: {sub: med(r, k, sub) for sub in r[0][k]} for k in PRESET_NESTED})
            row["workers"] = top
            row["over_original_floor"] = row["cpu_ms_per_image"] / floor_ms["original"]
            row["over_own_floor"] = row["cpu_ms_per_image"] / floor_ms[tree]
            row["producer_command"] = commands[(tree, preset)]
            row["runs"] = r
            res["presets"][preset] = row
            out["targets"][f"{preset}_{tree}_over_original_floor"] = row["over_original_floor"]
            out["targets"][f"{preset}_{tree}_at_most_{limits[preset]}x_original_floor"] = \
                row["over_original_floor"] <= limits[preset]
        out["results"][tree] = res
    out["ratios"] = {"restarts_floor_over_original_floor": floor_ms["restarts"]
                     / floor_ms["original"],
                     "restarts_mean_bytes_over_original": out["results"]["restarts"]["mean_bytes"]
                     / out["results"]["original"]["mean_bytes"]}
    for preset in args.presets:
        out["ratios"][f"{preset}_restarts_cpu_over_original_cpu"] = (
            out["results"]["restarts"]["presets"][preset]["cpu_ms_per_image"]
            / out["results"]["original"]["presets"][preset]["cpu_ms_per_image"])
    return write_out(args, out, print_restarts)


def print_restarts(args, out):
    rc = out["restart_copy"]
    print(f"restart markers every {rc['restart_interval']} MCUs: {rc['transcoded']} of "
          f"{rc['files']} files transcoded, {100 * (rc['size_ratio'] - 1):+.2f}% bytes; "
          f"{args.workers[-1]} workers; medians of {args.repeat}")
    a_ms = out["results"]["original"]["floor_cpu_ms_per_image"]
    print(f"{'tree / measurement':<40} {'CPU ms/image':>12} {'x orig floor':>12} "
          f"{'x own floor':>11}")
    for tree, res in out["results"].items():
        f_ms = res["floor_cpu_ms_per_image"]
        print(f"{tree + ': decode floor':<40} {f_ms:>12.3f} {f_ms / a_ms:>12.3f} {1:>11.3f}")
        for preset, row in res["presets"].items():
            st = row["stage_cpu_ms_per_image"]
            print(f"{tree + ': ' + preset:<40} {row['cpu_ms_per_image']:>12.3f} "
                  f"{row['over_original_floor']:>12.3f} {row['over_own_floor']:>11.3f}")
            if row["restart_window_share"] is not None:
                print(f"      {100 * row['restart_window_share']:.0f}% of the images decoded "
                      "from their restart intervals alone")
            if None not in st.values():
                print(f"      stages: read {st['read']:.3f}, codec {st['codec']:.3f}, resample "
                      f"{st['resample']:.3f}, publish {st['publish']:.4f} ms/image")
    for k, v in out["ratios"].items():
        print(f"{k}: {v:.3f}")
    for k, v in out["targets"].items():
        if isinstance(v, bool):
            print(f"target {k}: {'holds' if v else 'MISSED'}")


def main_entry_points(args, out):
    """--mode entry-points: per round, the floor (a) and, per preset, two producer runs of
    --epochs epochs at the largest --workers count, with entry points (the default, "on") and
    without (--entry-points-mb 0, "off"), their order alternating. Besides each whole run, the
    CPU per image of what it decoded after its first epoch (after_first_epoch): what every
    epoch of a training run costs once the first has learnt each file's entry points."""
    workdir = tempfile.mkdtemp(prefix="tsock-entry-bench-")
    os.chmod(workdir, 0o700)
    top, epochs = args.workers[-1], max(2, args.epochs)
    floors, runs, commands = [], {}, {}
    configs = {"off": ["--entry-points-mb", "0"], "on": []}
    try:
        root = dataset_root(args, workdir, out)
        for n in range(args.repeat):
            floor, fcmd = run_floor(args, root, repeat=1)
            floors.append(floor)
            commands["floor"] = " ".join(fcmd)
            order = list(configs) if n % 2 == 0 else list(reversed(configs))
            for preset in args.presets:
                for name in order:
                    res, pcmd, _ = run_tsock(args, root, preset, top, workdir,
                                             f"{preset}-{name}-{n}", extra=configs[name],
                                             epochs=epochs, steady=True)
                    if res["after_first_epoch_cpu_ms_per_image"] is None:
                        raise RuntimeError(f"{preset} {name}: no interval record after the "
                                           "first epoch (more --epochs)")
                    runs.setdefault((preset, name), []).append(res)
                    commands[(preset, name)] = " ".join(pcmd)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    floor_ms = med(floors, "floor_cpu_ms_per_image")
    limits = {"train": 0.75, "val": 1.0}  # issue 21
    out["config"]["epochs_per_run"] = epochs
    out["results"] = {"floor_cpu_ms_per_image": floor_ms,
                      "floor_runs": [f["floor_cpu_ms_per_image"] for f in floors],
                      "mean_bytes": floors[0]["mean_bytes"], "floor_command": commands["floor"],
                      "presets": {}}
    out["targets"] = {}
    for preset in args.presets:
        row = {}
        for name in configs:
            r = runs[(preset, name)]
            row[name] = {k: med(r, k) for k in PRESET_KEYS + (
                "entry_jump_share", "entry_point_bytes", "after_first_epoch_cpu_ms_per_image")}
            row[name].update({k: {sub: med(r, k, sub) for sub in r[0][k]}
                              for k in PRESET_NESTED})
            row[name]["over_floor"] = row[name]["cpu_ms_per_image"] / floor_ms
            row[name]["after_first_epoch_over_floor"] = (
                row[name]["after_first_epoch_cpu_ms_per_image"] / floor_ms)
            # Each round's figure over the same round's floor: the machine's load drifts from
            # round to round, and a round's runs share it.
            row[name]["after_first_epoch_over_round_floor"] = statistics.median(
                x["after_first_epoch_cpu_ms_per_image"] / f["floor_cpu_ms_per_image"]
                for x, f in zip(r, floors))
            row[name]["producer_command"] = commands[(preset, name)]
            row[name]["runs"] = r
        for k in ("cpu_ms_per_image", "after_first_epoch_cpu_ms_per_image"):
            row[f"{k}_on_over_off"] = row["on"][k] / row["off"][k]
        row["entry_point_bytes_per_image"] = (row["on"]["entry_point_bytes"] or 0) / max(
            1, floors[0]["decodable"])
        out["results"]["presets"][preset] = row
        for name, v in (("whole_run", row["on"]["over_floor"]),
                        ("after_first_epoch", row["on"]["after_first_epoch_over_floor"])):
            out["targets"][f"{preset}_{name}_over_floor"] = v
            out["targets"][f"{preset}_{name}_at_most_{limits[preset]}x_floor"] = \
                v <= limits[preset]
    return write_out(args, out, print_entry_points)


def print_entry_points(args, out):
    res = out["results"]
    print(f"{args.workers[-1]} workers, {out['config']['epochs_per_run']} epochs a run; "
          f"medians of {args.repeat}; decode floor {res['floor_cpu_ms_per_image']:.3f} "
          "ms/image")
    print(f"{'preset / run':<44} {'CPU ms/image':>12} {'x floor':>8}")
    for preset, row in res["presets"].items():
        for name, label in (("off", "without entry points"), ("on", "with entry points")):
            r = row[name]
            print(f"{preset + ': ' + label + ', whole run':<44} {r['cpu_ms_per_image']:>12.3f} "
                  f"{r['over_floor']:>8.3f}")
            print(f"{preset + ': ' + label + ', after epoch 1':<44} "
                  f"{r['after_first_epoch_cpu_ms_per_image']:>12.3f} "
                  f"{r['after_first_epoch_over_floor']:>8.3f}   (per round: "
                  f"{r['after_first_epoch_over_round_floor']:.3f})")
        print(f"      with / without: whole runs {row['cpu_ms_per_image_on_over_off']:.3f}, "
              f"after epoch 1 {row['after_first_epoch_cpu_ms_per_image_on_over_off']:.3f}; "
              f"{100 * (row['on']['entry_jump_share'] or 0):.0f}% of the decodes started at "
              f"entry points; {row['entry_point_bytes_per_image']:.0f} bytes of them per image")
    for k, v in out["targets"].items():
        if isinstance(v, bool):
            print(f"target {k}: {'holds' if v else 'MISSED'}")


def main():
    args = parse_args()
    out = {"benchmark": "image_pipeline", "date_utc": time.strftime("%Y-%m-%d %H:%M",
                                                                   time.gmtime()),
           "machine": machine(),
           "commit": git_commit(),
           "config": {"repeat": args.repeat, "workers": args.workers, "presets": args.presets,
                      "batch_size": args.batch_size, "epochs_per_run": args.epochs,
                      "epochs_by_workers": {w: epochs_for(args, w) for w in args.workers},
                      "build_dir": args.build_dir, "mode": args.mode}}
    if args.mode == "shards":
        out["config"].update({"shard_samples": args.shard_samples,
                              "shard_window": args.shard_window})
        return main_shards(args, out)
    if args.mode == "restarts":
        out["config"]["restart_interval"] = args.restart_interval
        return main_restarts(args, out)
    if args.mode == "entry-points":
        return main_entry_points(args, out)
    top = args.workers[-1]
    workdir = tempfile.mkdtemp(prefix="tsock-image-bench-")
    os.chmod(workdir, 0o700)
    t_start = time.monotonic()
    try:
        root = dataset_root(args, workdir, out)

        floor, cmd = run_floor(args, root)
        out["floor"] = floor
        out["floor"]["command"] = " ".join(cmd)
        out["dataset"].update({"decodable_jpegs": floor["decodable"],
                               "mean_bytes": floor["mean_bytes"],
                               "mean_width": floor["mean_width"],
                               "mean_height": floor["mean_height"]})

        scaling = {(p, w): [] for p in args.presets for w in args.workers}
        tv, floors = [], []
        commands = {}
        for n in range(args.repeat):  # interleaved: drift of the shared machine hits all
            floors.append(run_floor(args, root, repeat=1)[0])
            for (preset, w) in scaling:
                res, pcmd, ccmd = run_tsock(args, root, preset, w, workdir, f"{preset}{w}-{n}")
                scaling[(preset, w)].append(res)
                commands[(preset, w)] = (" ".join(pcmd), " ".join(ccmd))
            if not args.skip_torchvision:
                tv.append(run_torchvision(args, root, top))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    out["run_s"] = time.monotonic() - t_start
    # (a): each round's run, the same program as the up-front one with one pass
    out["floor_rounds_cpu_ms_per_image"] = [f["floor_cpu_ms_per_image"] for f in floors]

    keys = ("cpu_ms_per_image", "decode_ms_per_image", "decode_share_of_cpu", "images_per_s",
            "consumer_cpu_ms_per_image", "index_s", "read_s", "wall_s")
    nested = ("stage_cpu_ms_per_image", "thread_cpu_ms_per_image")
    a_ms = statistics.median(out["floor_rounds_cpu_ms_per_image"])
    out["floor_cpu_ms_per_image"] = a_ms
    out["presets"] = {}
    out["targets"] = {}
    for preset in args.presets:
        rows = []
        for w in args.workers:
            runs = scaling[(preset, w)]
            row = {"workers": w, **{k: med(runs, k) for k in keys},
                   "read_mode": runs[0]["read_mode"]}
            for k in nested:
                row[k] = {sub: med(runs, k, sub) for sub in runs[0][k]}
            row["runs"] = runs
            rows.append(row)
        b = rows[-1]
        res = {"scaling": rows, "model": amdahl(rows),
               "top": {k: b[k] for k in keys + nested},
               "producer_command": commands[(preset, top)][0],
               "consumer_command": commands[(preset, top)][1]}
        res["top"]["workers"] = top
        # Against the floor: the producer's whole CPU per image (index, reader, service thread
        # included) and the workers' decode CPU per image alone.
        res["over_floor"] = b["cpu_ms_per_image"] / a_ms
        res["over_round_floor"] = statistics.median(
            r["cpu_ms_per_image"] / f["floor_cpu_ms_per_image"]
            for r, f in zip(scaling[(preset, top)], floors))
        res["decode_over_floor"] = b["decode_ms_per_image"] / a_ms
        out["presets"][preset] = res
    limits = {"train": 0.75, "val": 1.0}  # issue 21
    for preset, res in out["presets"].items():
        out["targets"][f"{preset}_over_floor"] = res["over_floor"]
        out["targets"][f"{preset}_at_most_{limits[preset]}x_floor"] = \
            res["over_floor"] <= limits[preset]
    # Issue 4's figures, kept: (b) is the train preset at the largest worker count.
    if "train" in out["presets"]:
        tb = out["presets"]["train"]["top"]
        out["tsock"] = dict(tb)
        out["tsock_scaling"] = out["presets"]["train"]["scaling"]
        out["targets"]["b_over_a"] = tb["cpu_ms_per_image"] / a_ms
        out["targets"]["in_process_pipeline_over_a"] = floor["pipeline_over_floor"]
    if tv:
        out["torchvision"] = {k: med(tv, k) for k in ("cpu_ms_per_image", "cpu_s", "main_cpu_s",
                                                      "workers_cpu_s", "wall_s",
                                                      "whole_process_cpu_s",
                                                      "images_per_s_after_first_batch")}
        out["torchvision"].update({k: tv[0][k] for k in ("torch", "torchvision", "pillow")})
        out["torchvision"]["runs"] = tv
        if "train" in out["presets"]:
            c_ms, b_ms = out["torchvision"]["cpu_ms_per_image"], out["tsock"]["cpu_ms_per_image"]
            out["targets"]["c_over_b"] = c_ms / b_ms
            out["targets"]["b_3x_less_than_c"] = c_ms >= 3 * b_ms
    out["machine"]["load_avg_at_end"] = os.getloadavg()

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print_summary(args, out, floor)
    print(f"written: {args.out} ({out['run_s']:.0f} s)")
    warn_fallback(args)
    return 0


def print_summary(args, out, floor):
    d = out["dataset"]
    a_ms = out["floor_cpu_ms_per_image"]
    print(f"files: {d.get('decodable_jpegs')} JPEGs, mean {d['mean_bytes'] / 1e3:.1f} kB, "
          f"{d['mean_width']:.0f} x {d['mean_height']:.0f}; {out['machine']['cpus']} CPUs "
          f"({out['machine']['cpu_model']}); medians of {args.repeat}")
    print(f"{'measurement':<56} {'CPU ms/image':>12} {'x floor':>8}")
    print(f"{'(a) TurboJPEG full decode, 1 thread (the floor)':<56} {a_ms:>12.3f} {1:>8.2f}")
    print(f"{'    tsock_pipeline_load, train, 1 worker, in process':<56} "
          f"{floor['pipeline_cpu_ms_per_image']:>12.3f} {floor['pipeline_over_floor']:>8.2f}")
    for preset, res in out["presets"].items():
        t = res["top"]
        label = f"(b) tsock-producer {preset}, {t['workers']} workers"
        print(f"{label:<56} "
              f"{t['cpu_ms_per_image']:>12.3f} {res['over_floor']:>8.2f}   (per round: "
              f"{res['over_round_floor']:.2f})")
        st = t["stage_cpu_ms_per_image"]
        if None in st.values():
            print("      stages: not in this build's statistics (a build before issue 21)")
        else:
            print(f"      stages: read {st['read']:.3f}, codec {st['codec']:.3f}, resample "
                  f"{st['resample']:.3f}, publish {st['publish']:.4f} ms/image")
    if "torchvision" in out:
        print(f"{f'(c) torchvision DataLoader train, {args.workers[-1]} workers':<56} "
              f"{out['torchvision']['cpu_ms_per_image']:>12.3f}")
    for preset, res in out["presets"].items():
        if res["model"] is None:
            print(f"(d) {preset} scaling, images/s: " + ", ".join(
                f"{row['workers']}w {row['images_per_s'] or 0:.0f}" for row in res["scaling"])
                + " (no model: this build's final record has no per-thread CPU, or no "
                  "1-worker run)")
            continue
        print(f"(d) {preset} scaling, images/s (model): " + ", ".join(
            f"{m['workers']}w {m['measured_images_per_s'] or 0:.0f} "
            f"({m['predicted_images_per_s']:.0f})" for m in res["model"]["at_measured_workers"]))
        mo = res["model"]
        print(f"    serial {mo['serial_ms_per_image']:.4f} ms/image, parallel "
              f"{mo['parallel_ms_per_image']:.3f}: predicts " + ", ".join(
                  f"{p['workers']} cores {p['predicted_images_per_s']:.0f}"
                  for p in mo["predictions"]) + " images/s")
    for k, v in out["targets"].items():
        if isinstance(v, bool):
            print(f"target {k}: {'holds' if v else 'MISSED'}")


if __name__ == "__main__":
    sys.exit(main())
