#!/usr/bin/env python3
"""Augmentation cost: producer CPU per image with TrivialAugmentWide + RandomErasing(0.1)
against the plain train preset and against torchvision's reference preset with the same
options in a DataLoader.

One invocation, the same photographs for every measurement (an ImageNet-shaped tree written by
tsock-mkdataset from /usr/share/backgrounds, as benchmarks/image_pipeline.py does; or --root):

  (a) plain      tsock-producer --dataset imagenet --split train (RandomResizedCrop(224) +
                 flip) with --workers N feeding one tsock-consume; CPU per image = the
                 producer's final cpu_s / samples (the whole process: index, reads, decode).
  (b) augmented  the same with --auto-augment ta_wide --augment-interpolation bilinear
                 --random-erase 0.1 (the reference recipe's augmentations; its script passes
                 bilinear to TrivialAugmentWide).
  (c) torchvision  ImageFolder + DataLoader(num_workers=N, same batch size) with the
                 reference script's ClassificationPresetTrain(crop_size=224,
                 auto_augment_policy="ta_wide", random_erase_prob=0.1) on PIL images, as
                 references/classification/presets.py builds it: RandomResizedCrop(224,
                 bilinear), RandomHorizontalFlip, TrivialAugmentWide(bilinear), PILToTensor,
                 ConvertImageDtype(float), Normalize, RandomErasing(0.1); getrusage SELF +
                 CHILDREN from before ImageFolder to after the last batch (imports not
                 counted).

  (d) per operation  tsock_augment_apply on a 224 x 224 photograph crop, each operation with
                 a typical magnitude (geometric ones nearest and bilinear), thread CPU time,
                 median of 50 calls (the call's scratch allocation included).

Each measurement runs --repeat times (3), interleaved; medians are reported and ratios come from
them. Goals (issue 23): (b) <= 1.5 x (a); (c) >= 4 x (b). A missed goal is printed, not an error.

    python3 benchmarks/augment_cost.py [--images 400] [--repeat 3] [--root DIR]

Writes docs/benchmarks/augment_cost.json (--out) and prints a table.
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from benchlib import (add_tree_args, find_programs, git_commit,  # beside this script
                      machine, make_tree, run_torchvision_baseline, serve_and_consume,
                      warn_fallback)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(REPO, "build", "normal")
AUGMENT = ["--auto-augment", "ta_wide", "--augment-interpolation", "bilinear",
           "--random-erase", "0.1"]

# The reference preset for the torchvision baseline (benchlib.run_torchvision).
TORCHVISION_TRANSFORM = """
from torchvision.transforms import InterpolationMode
bilinear = InterpolationMode.BILINEAR
# references/classification/presets.py, ClassificationPresetTrain (backend "pil", use_v2 off)
tf = transforms.Compose([
    transforms.RandomResizedCrop(224, interpolation=bilinear, antialias=True),
    transforms.RandomHorizontalFlip(0.5),
    transforms.TrivialAugmentWide(interpolation=bilinear),
    transforms.PILToTensor(),
    transforms.ConvertImageDtype(torch.float),
    transforms.Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
    transforms.RandomErasing(p=0.1),
])
"""


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_tree_args(ap)
    ap.set_defaults(images=400)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=1, help="epochs per run")
    ap.add_argument("--bin-dir", default=os.path.join(BUILD, "producer"))
    ap.add_argument("--library", default=os.path.join(BUILD, "libtsock", "libtsock.so"))
    ap.add_argument("--out", default=os.path.join(REPO, "docs", "benchmarks",
                                                   "augment_cost.json"))
    args = ap.parse_args()
    find_programs(ap, args)
    if args.repeat < 1 or args.workers < 1 or args.epochs < 1:
        ap.error("--repeat, --workers and --epochs must be at least 1")
    return args


def run_tsock(args, root, extra, workdir, tag):
    """One producer + one consumer; the producer's CPU per image and the pipeline's decode
    time (decode + augment in the workers)."""
    endpoint = f"ipc://{workdir}/{tag}.sock"
    stats = os.path.join(workdir, f"{tag}.jsonl")
    pcmd = [args.producer, "--dataset", "imagenet", "--root", root, "--split", "train",
            "--workers", str(args.workers), "--batch-size", str(args.batch_size), "--epochs",
            str(args.epochs), "--endpoint", endpoint, "--wait-consumers", "1", "--stats-json",
            stats, "--quiet", *extra]
    ccmd = [args.consume, "--endpoint", endpoint, "--content", "images", "--epochs",
            str(args.epochs), "--json", "--quiet"]
    final, _ = serve_and_consume(pcmd, ccmd, stats)
    return {"samples": final["samples"], "cpu_s": final["cpu_s"], "wall_s": final["wall_s"],
            "cpu_ms_per_image": 1e3 * final["cpu_s"] / final["samples"],
            "decode_ms_per_image": 1e3 * final["pipeline"]["decode_s"] / final["samples"]}, pcmd


def run_torchvision(args, root):
    return run_torchvision_baseline(TORCHVISION_TRANSFORM, root, args.workers, args.batch_size,
                                    args.epochs)


OPS = [("Identity", 0, [], 0), ("ShearX", 1, [0.3], 0), ("ShearX", 1, [0.3], 1),
       ("ShearY", 2, [0.3], 0), ("ShearY", 2, [0.3], 1), ("TranslateX", 3, [14.0], 0),
       ("TranslateX", 3, [14.0], 1), ("TranslateY", 4, [14.0], 0), ("TranslateY", 4, [14.0], 1),
       ("Rotate", 5, [30.0], 0), ("Rotate", 5, [30.0], 1), ("Brightness", 6, [1.3], 0),
       ("Color", 7, [1.3], 0), ("Contrast", 8, [1.3], 0), ("Sharpness", 9, [1.3], 0),
       ("Posterize", 10, [4], 0), ("Solarize", 11, [128.0], 0), ("AutoContrast", 12, [], 0),
       ("Equalize", 13, [], 0), ("Invert", 14, [], 0), ("Hue", 15, [0.1], 0),
       ("Erase", 16, [10, 20, 80, 60, 124, 116, 104], 0)]


def run_ops(args, root):
    """(d): CPU ms per call of each operation on a 224 x 224 crop of the tree's first photo."""
    import ctypes
    import glob
    import numpy as np
    from PIL import Image
    lib = ctypes.CDLL(args.library)
    fn = lib.tsock_augment_apply
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                   ctypes.POINTER(ctypes.c_double), ctypes.c_int, ctypes.c_int]
    path = sorted(glob.glob(os.path.join(root, "*", "*")))[0]
    with Image.open(path) as im:
        base = np.asarray(im.convert("RGB").resize((224, 224), Image.BILINEAR)).copy()
    out = []
    for name, op, params, interp in OPS:
        arr = (ctypes.c_double * max(1, len(params)))(*params)
        times = []
        for _ in range(50):
            img = base.copy()
            t = time.thread_time()
            if fn(img.ctypes.data, 224, 224, op, arr, len(params), interp) != 0:
                raise RuntimeError(f"tsock_augment_apply({name}) failed")
            times.append(time.thread_time() - t)
        out.append({"op": name, "interpolation": ["nearest", "bilinear"][interp],
                    "params": params, "cpu_ms": 1e3 * statistics.median(times)})
    return out


def med(runs, key):
    return statistics.median(r[key] for r in runs)


def main():
    args = parse_args()
    out = {"benchmark": "augment_cost",
           "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
           "machine": machine(), "commit": git_commit(),
           "config": {"repeat": args.repeat, "workers": args.workers,
                      "batch_size": args.batch_size, "epochs_per_run": args.epochs,
                      "augment_flags": " ".join(AUGMENT)}}
    workdir = tempfile.mkdtemp(prefix="tsock-augment-bench-")
    os.chmod(workdir, 0o700)
    runs = {"plain": [], "augmented": [], "torchvision": []}
    commands = {}
    try:
        if args.root:
            root, out["dataset"] = args.root, {"root": args.root}
        else:
            root, summary, cmd = make_tree(args, workdir)
            out["dataset"] = {k: summary.get(k) for k in (
                "images", "classes", "files", "total_bytes", "mean_width", "mean_height",
                "mean_bytes", "source", "quality", "photos_fallback")}
            out["dataset"]["command"] = " ".join(cmd)
        for n in range(args.repeat):  # interleaved: drift of the shared machine hits all
            for name, extra in (("plain", []), ("augmented", AUGMENT)):
                res, pcmd = run_tsock(args, root, extra, workdir, f"{name}-{n}")
                runs[name].append(res)
                commands[name] = " ".join(pcmd)
            runs["torchvision"].append(run_torchvision(args, root))
        out["per_operation_224"] = run_ops(args, root)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    for name in ("plain", "augmented"):
        out[name] = {k: med(runs[name], k) for k in ("cpu_ms_per_image", "decode_ms_per_image",
                                                     "wall_s")}
        out[name]["command"] = commands[name]
        out[name]["runs"] = runs[name]
    tv = runs["torchvision"]
    out["torchvision"] = {k: med(tv, k) for k in ("cpu_ms_per_image", "cpu_s", "wall_s")}
    out["torchvision"].update({k: tv[0][k] for k in ("torch", "torchvision", "pillow")})
    out["torchvision"]["runs"] = tv
    a, b, c = (out[k]["cpu_ms_per_image"] for k in ("plain", "augmented", "torchvision"))
    out["ratios"] = {"augmented_over_plain": b / a, "goal_at_most_1.5": b / a <= 1.5,
                     "torchvision_over_augmented": c / b, "goal_at_least_4": c / b >= 4}
    out["machine"]["load_avg_at_end"] = os.getloadavg()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")

    print(f"{args.workers} workers, medians of {args.repeat}, load {out['machine']['load_avg_at_end']}")
    print(f"{'measurement':<58} {'CPU ms/image':>12}")
    print(f"{'(a) tsock-producer, train preset':<58} {a:>12.3f}")
    print(f"{'(b) tsock-producer, + ta_wide, random erase 0.1':<58} {b:>12.3f}")
    print(f"{'(c) torchvision reference preset, same options, DataLoader':<58} {c:>12.3f}")
    r = out["ratios"]
    print(f"goal (b) <= 1.5 x (a): {r['augmented_over_plain']:.2f} -> "
          f"{'holds' if r['goal_at_most_1.5'] else 'MISSED'}")
    print(f"goal (c) >= 4 x (b):   {r['torchvision_over_augmented']:.2f} -> "
          f"{'holds' if r['goal_at_least_4'] else 'MISSED'}")
    print("(d) per operation, 224 x 224: " + ", ".join(
        f"{o['op']}{'/bilinear' if o['interpolation'] == 'bilinear' else ''} {o['cpu_ms']:.2f}"
        for o in out["per_operation_224"]) + " ms")
    print(f"written: {args.out}")
    warn_fallback(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
