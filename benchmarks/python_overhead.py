#!/usr/bin/env python3
"""Per-batch overhead of the Python consumer (tsock.DataLoader) versus the C consumer.

Each run starts its own tsock-producer (synthetic dataset, tiny batches, so the control channel
and the binding are the whole cost), reads the same number of batches with one consumer, and
measures:

  busy_us_per_batch   (loop wall time - time blocked in tsock_consumer_next) / batches: what
                      the consumer itself spends per batch outside the wait (for Python: the
                      ctypes calls, the numpy/torch views, the release). Independent of how
                      fast the producer is.
  cpu_us_per_batch    process CPU time per batch (consumer process, its service thread too).
  batches_per_s       end-to-end rate (bounded by the producer when the consumer is faster).
  step_us p50/p99     Python: time from one loop body to the next (includes waiting);
                      C: tsock_consumer_next latency (tsock-consume's next_latency_us).

The overhead reported is Python busy time per batch minus C busy time per batch (and the same
for CPU time), for the DataLoader yielding torch tensors, yielding numpy arrays, and for the
bare Consumer.next()/release() loop. Target: at most 50 us more per batch.

    TSOCK_LIBRARY=build/libtsock/libtsock.so python3 benchmarks/python_overhead.py \
        [--bin-dir build/producer] [--batches 100000] [--repeat 3]

Prints one JSON object. Not a test: figures go to docs/python.md and issue notes.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bindings", "python"))
os.environ.setdefault("TSOCK_LIBRARY", os.path.join(REPO, "build", "libtsock", "libtsock.so"))

import tsock  # noqa: E402


def start_producer(args, endpoint, epochs):
    argv = [os.path.join(args.bin_dir, "tsock-producer"), "--dataset", "synthetic",
            "--endpoint", endpoint, "--batch-size", str(args.batch_size),
            "--slots", str(args.slots), "--samples", str(args.samples_per_epoch),
            "--image-size", str(args.image_size), "--epochs", str(epochs),
            "--wait-consumers", "1", "--quiet"]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL)


def percentile(sorted_values, q):
    if not sorted_values:
        return None
    i = min(len(sorted_values) - 1, int(round(q * (len(sorted_values) - 1))))
    return sorted_values[i]


def run_c(args, endpoint, epochs):
    prod = start_producer(args, endpoint, epochs)
    try:
        out = subprocess.run(
            [os.path.join(args.bin_dir, "tsock-consume"), "--endpoint", endpoint,
             "--epochs", str(epochs), "--samples", str(args.samples_per_epoch), "--json",
             "--quiet"], capture_output=True, text=True, timeout=600)
        r = json.loads(out.stdout)
        prod.wait(timeout=60)
    finally:
        if prod.poll() is None:
            prod.kill()
            prod.wait()
    n = r["batches"]
    return {
        "batches": n,
        "busy_us_per_batch": (r["wall_s"] - r["wait_s"]) / n * 1e6,
        "cpu_us_per_batch": r["cpu_s"] / n * 1e6,
        "batches_per_s": n / r["wall_s"],
        "step_us_p50": r["next_latency_us"]["p50"],
        "step_us_p99": r["next_latency_us"]["p99"],
        "content_errors": r["content_errors"],
    }


def run_python(args, endpoint, epochs, mode):
    prod = start_producer(args, endpoint, epochs)
    try:
        if mode == "consumer":
            source = tsock.Consumer(endpoint, timeout=30)
        else:
            source = tsock.DataLoader(endpoint, timeout=30, output=mode)
        steps = []
        n = 0
        cpu0 = time.process_time()
        w0 = source.stats()["wait_s"]
        t0 = time.perf_counter_ns()
        last = t0
        if mode == "consumer":
            while True:
                try:
                    b = source.next(timeout=30)
                except tsock.EndOfStream:
                    break
                now = time.perf_counter_ns()
                steps.append(now - last)
                last = now
                n += 1
                b.release()
        else:
            for _ in range(epochs):
                for item in source:
                    now = time.perf_counter_ns()
                    steps.append(now - last)
                    last = now
                    n += 1
        wall = (time.perf_counter_ns() - t0) * 1e-9
        cpu = time.process_time() - cpu0
        wait = source.stats()["wait_s"] - w0
        source.close()
        prod.wait(timeout=60)
    finally:
        if prod.poll() is None:
            prod.kill()
            prod.wait()
    steps.sort()
    return {
        "batches": n,
        "busy_us_per_batch": (wall - wait) / n * 1e6,
        "cpu_us_per_batch": cpu / n * 1e6,
        "batches_per_s": n / wall,
        "step_us_p50": percentile(steps, 0.5) / 1e3,
        "step_us_p99": percentile(steps, 0.99) / 1e3,
    }


def median_run(runs):
    keys = [k for k in runs[0] if isinstance(runs[0][k], (int, float))]
    return {k: statistics.median(r[k] for r in runs) for k in keys}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin-dir", default=os.environ.get(
        "TSOCK_BIN_DIR", os.path.join(REPO, "build", "producer")))
    ap.add_argument("--batches", type=int, default=100000)
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--image-size", type=int, default=1)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--samples-per-epoch", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    batches_per_epoch = -(-args.samples_per_epoch // args.batch_size)
    epochs = max(1, args.batches // batches_per_epoch)
    modes = ["c", "consumer", "numpy"]
    if tsock._views.get_torch() is not None:
        modes.append("torch")
    raw = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="tsock-bench-", dir="/tmp") as d:
        for rep in range(args.repeat):
            for m in modes:  # interleaved, so drifts of the machine hit every mode alike
                ep = f"ipc://{d}/{m}{rep}.sock"
                if m == "c":
                    raw[m].append(run_c(args, ep, epochs))
                else:
                    raw[m].append(run_python(args, ep, epochs, m))
    results = {m: median_run(raw[m]) for m in modes}
    names = {"consumer": "python_consumer", "numpy": "python_dataloader_numpy",
             "torch": "python_dataloader_torch"}
    overhead = {}
    for m in modes[1:]:
        overhead[names[m]] = {
            "busy_us_per_batch": results[m]["busy_us_per_batch"] - results["c"]["busy_us_per_batch"],
            "cpu_us_per_batch": results[m]["cpu_us_per_batch"] - results["c"]["cpu_us_per_batch"],
        }
    worst = max(v["busy_us_per_batch"] for v in overhead.values())
    out = {
        "benchmark": "python_overhead",
        "library": tsock.library_path,
        "library_version": tsock.library_version,
        "python": sys.version.split()[0],
        "torch": getattr(tsock._views.get_torch(), "__version__", None),
        "cpus": os.cpu_count(),
        "config": {"batches": epochs * batches_per_epoch, "batch_size": args.batch_size,
                   "image_size": args.image_size, "slots": args.slots,
                   "repeat": args.repeat, "statistic": "median of repeats"},
        "c_consumer": results["c"],
        **{names[m]: results[m] for m in modes[1:]},
        "overhead_vs_c": overhead,
        "target_us": 50.0,
        "worst_busy_overhead_us": worst,
        "meets_target": worst <= 50.0,
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
