#!/usr/bin/env python3
"""Start one tsock-producer and K collocated training jobs; print each job's throughput.

    python3 examples/python/launch.py --jobs 3 [--epochs 2] [--batch-size 64] ...
    python3 examples/python/launch.py --jobs 3 --mode both   # also K jobs with torch loading

--mode tsock (default): one producer computes every batch once and the K jobs
(examples/python/train.py --loader tsock) share it. --mode torch: the K jobs each load their
own data with a torch DataLoader, as without tsock. --mode both runs the two one after the
other and prints them side by side.

Programs are found in --bin-dir (default $TSOCK_BIN_DIR, else build/normal/producer); the binding in
bindings/python unless tsock is installed (set TSOCK_LIBRARY when libtsock is not installed).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def child_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (os.path.join(REPO, "bindings", "python"), env.get("PYTHONPATH")) if p)
    lib = os.path.join(REPO, "build", "normal", "libtsock", "libtsock.so")
    if "TSOCK_LIBRARY" not in env and os.path.exists(lib):
        env["TSOCK_LIBRARY"] = lib
    return env


def train_argv(args, loader, name, endpoint=None):
    argv = [sys.executable, os.path.join(HERE, "train.py"), "--loader", loader, "--json",
            "--name", name, "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
            "--samples", str(args.samples), "--image-size", str(args.image_size),
            "--workers", str(args.workers)]
    if args.threads:
        argv += ["--threads", str(args.threads)]
    if args.device:
        argv += ["--device", args.device]
    if endpoint:
        argv += ["--endpoint", endpoint]
    return argv


def run_jobs(argvs, env, timeout):
    jobs = [subprocess.Popen(a, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env) for a in argvs]
    results = []
    try:
        for j in jobs:
            out, err = j.communicate(timeout=timeout)
            if j.returncode != 0:
                raise RuntimeError(f"a training job failed ({j.returncode}):\n{err[-3000:]}")
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for j in jobs:
            if j.poll() is None:
                j.kill()
                j.wait()
    return results


def run_tsock(args, env):
    with tempfile.TemporaryDirectory(prefix="tsock-launch-", dir="/tmp") as d:
        endpoint = f"ipc://{d}/train.sock"
        stats = os.path.join(d, "producer.json")
        producer = subprocess.Popen(
            [os.path.join(args.bin_dir, "tsock-producer"), "--dataset", "synthetic",
             "--endpoint", endpoint, "--batch-size", str(args.batch_size),
             "--slots", str(args.slots), "--samples", str(args.samples),
             "--image-size", str(args.image_size), "--epochs", str(args.epochs),
             "--wait-consumers", str(args.jobs), "--stats-json", stats, "--quiet"],
            stdin=subprocess.DEVNULL)
        try:
            t0 = time.perf_counter()
            results = run_jobs([train_argv(args, "tsock", f"job{i}", endpoint)
                                for i in range(args.jobs)], env, args.timeout)
            wall = time.perf_counter() - t0
            producer.wait(timeout=30)
            with open(stats) as f:  # one JSON object per line; the last is the final one
                pstats = json.loads(f.read().strip().splitlines()[-1])
        finally:
            if producer.poll() is None:
                producer.kill()
                producer.wait()
    return results, wall, pstats


def report(title, results, wall, extra=None):
    print(f"{title}:")
    for r in results:
        print(f"  {r['name']:>6}: {r['images']} images in {r['seconds']:.2f} s = "
              f"{r['images_per_s']:8.0f} images/s")
    total = sum(r["images"] for r in results)
    slowest = max(r["seconds"] for r in results)
    print(f"  all {len(results)} jobs: {total} images, {total / slowest:.0f} images/s together "
          f"(training time of the slowest job; {wall:.2f} s with process start-up)"
          + (f"; {extra}" if extra else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--mode", choices=("tsock", "torch", "both"), default="tsock")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--samples", type=int, default=4096)
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--workers", type=int, default=0, help="torch DataLoader workers per job")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per job")
    ap.add_argument("--device", default=None)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--bin-dir", default=os.environ.get(
        "TSOCK_BIN_DIR", os.path.join(REPO, "build", "normal", "producer")))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    env = child_env()
    summary = {}
    if args.mode in ("tsock", "both"):
        results, wall, pstats = run_tsock(args, env)
        summary["tsock"] = {"jobs": results, "wall_s": wall, "producer": pstats}
        if not args.json:
            report(f"tsock: 1 producer, {args.jobs} jobs", results, wall,
                   f"producer cpu {pstats.get('cpu_s', 0):.2f} s")
    if args.mode in ("torch", "both"):
        t0 = time.perf_counter()
        results = run_jobs([train_argv(args, "torch", f"job{i}") for i in range(args.jobs)],
                           env, args.timeout)
        wall = time.perf_counter() - t0
        summary["torch"] = {"jobs": results, "wall_s": wall}
        if not args.json:
            report(f"torch DataLoader: {args.jobs} jobs, each loading its own data", results,
                   wall)
    if args.json:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
