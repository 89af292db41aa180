#!/usr/bin/env python3
"""Preset output of two builds, byte against byte: what a change to the decode did to the pixels.

Each build's tsock-producer serves the same tree (train and val presets, the same --seed) to a
tsock.DataLoader of this checkout's binding, `--epochs` epochs each; every image of every
(epoch, sample id) is compared. Prints and writes (--out) per preset: images compared, images
that differ, the largest and the mean absolute difference in levels (over every byte).

    python3 benchmarks/preset_diff.py --before OLD_BUILD --after build/normal --root TREE
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bindings", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import git_commit, machine  # noqa: E402

# Runs in a fresh interpreter per build (TSOCK_LIBRARY differs): reads every image and saves
# them as one .npy per epoch, ordered by sample id.
READER = r"""
import sys, numpy as np, tsock
endpoint, epochs, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
# Saved after the last epoch: a consumer that dawdles between epochs is paused by the library
# and misses what was published meanwhile.
per_epoch = []
with tsock.DataLoader(endpoint, return_ids=True, timeout=120) as loader:
    for e in range(epochs):
        got = {}
        for images, labels, ids in loader:
            for img, i in zip(np.asarray(images), np.asarray(ids)):
                got[int(i)] = img.copy()
        per_epoch.append(got)
for e, got in enumerate(per_epoch):
    np.save(f"{out}.{e}.npy", np.stack([got[i] for i in sorted(got)]))
"""


def serve(build, root, preset, epochs, seed, workdir, tag):
    endpoint = f"ipc://{workdir}/{tag}.sock"
    prod = subprocess.Popen([os.path.join(build, "producer", "tsock-producer"), "--dataset",
                             "imagenet", "--root", root, "--split", preset, "--seed", str(seed),
                             "--epochs", str(epochs), "--endpoint", endpoint,
                             "--wait-consumers", "1", "--quiet"], stdin=subprocess.DEVNULL)
    env = dict(os.environ, TSOCK_LIBRARY=os.path.join(build, "libtsock", "libtsock.so"),
               PYTHONPATH=os.path.join(REPO, "bindings", "python"))
    out = os.path.join(workdir, tag)
    try:
        subprocess.run([sys.executable, "-c", READER, endpoint, str(epochs), out], env=env,
                       check=True, timeout=1800)
        if prod.wait(timeout=120) != 0:
            raise RuntimeError(f"{tag}: tsock-producer exit {prod.returncode}")
    finally:
        if prod.poll() is None:
            prod.kill()
            prod.wait()
    return [np.load(f"{out}.{e}.npy") for e in range(epochs)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="a build dir (producer/, libtsock/)")
    ap.add_argument("--after", required=True)
    ap.add_argument("--root", required=True, help="an ImageFolder tree")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out")
    args = ap.parse_args()
    res = {"benchmark": "preset_diff", "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
           "commit": git_commit(), "machine": machine(), "before": args.before,
           "after": args.after, "root": args.root, "epochs": args.epochs, "presets": {}}
    with tempfile.TemporaryDirectory(prefix="tsock-preset-diff-") as workdir:
        for preset in ("train", "val"):
            a = serve(args.before, args.root, preset, args.epochs, args.seed, workdir, f"b{preset}")
            b = serve(args.after, args.root, preset, args.epochs, args.seed, workdir, f"a{preset}")
            diffs = [np.abs(x.astype(np.int16) - y.astype(np.int16)) for x, y in zip(a, b)]
            r = {"images": int(sum(d.shape[0] for d in diffs)),
                 "images_differing": int(sum((d.reshape(d.shape[0], -1).max(axis=1) > 0).sum()
                                             for d in diffs)),
                 "max_abs_diff": int(max(d.max() for d in diffs)),
                 "mean_abs_diff": float(np.mean([d.mean() for d in diffs]))}
            res["presets"][preset] = r
            print(f"{preset}: {r['images']} images, {r['images_differing']} differ, max "
                  f"{r['max_abs_diff']}, mean {r['mean_abs_diff']:.6f} levels")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
