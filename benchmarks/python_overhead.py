#!/usr/bin/env python3
"""Per-batch overhead of the Python consumer (tsock.DataLoader) versus the C consumer.

Each run starts its own tsock-producer (synthetic dataset, tiny batches: the control channel
and the binding are the whole cost) and reads batches with one consumer: the C program
tsock-consume, or Python (tsock.DataLoader yielding torch tensors, yielding numpy arrays, and
the bare Consumer.next()/release() loop). Two situations:

1. "step": the consumer holds each batch for a simulated training step (--step-ms, 1 ms), so
   the next batch is ready when it is asked for, as in a training job. Measured per batch:
     Python: the time of one iteration of the loader (next, building the views, release of
             the previous batch): what a training loop pays per batch. Two kinds of step:
             "sleep" (the thread sleeps, like a step waiting on the GPU: the CPU's caches and
             clock are cold when the loader runs again) and "busy" (the thread spins, like a
             CPU step).
     C:      the time of tsock_consumer_next in tsock-consume --delay-ms (a sleeping step;
             its release is not in that figure).
   overhead_us = Python p50 - C p50. Target: at most 50 us per batch.

2. "saturated": no step, as fast as possible. Measured per batch: busy time (wall time minus
   time blocked in next), process CPU time (the consumer's service thread included) and the
   rate. With a 2-core machine the producer, both service threads and the consumer share the
   cores, so these figures include scheduling costs that grow with the consumer's own work.

    TSOCK_LIBRARY=build/libtsock/libtsock.so python3 benchmarks/python_overhead.py \
        [--bin-dir build/producer] [--batches 100000] [--step-batches 3000] [--repeat 3]

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


def run_c(args, endpoint, epochs, step_ms=0):
    prod = start_producer(args, endpoint, epochs)
    try:
        out = subprocess.run(
            [os.path.join(args.bin_dir, "tsock-consume"), "--endpoint", endpoint,
             "--epochs", str(epochs), "--samples", str(args.samples_per_epoch), "--json",
             "--delay-ms", str(step_ms), "--quiet"], capture_output=True, text=True,
            timeout=600)
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


def run_python_step(args, endpoint, epochs, mode, step_ms, kind):
    """Times each loader iteration while the consumer 'trains' step_ms per batch: asleep
    (kind "sleep", like a step waiting on the GPU) or spinning (kind "busy", a CPU step)."""
    prod = start_producer(args, endpoint, epochs)
    step_s = step_ms / 1000.0
    clock = time.perf_counter_ns
    if kind == "busy":
        def step(_):
            end = time.perf_counter() + step_s
            while time.perf_counter() < end:
                pass
    else:
        step = time.sleep
    try:
        if mode == "consumer":
            source = tsock.Consumer(endpoint, timeout=30)
        else:
            source = tsock.DataLoader(endpoint, timeout=30, output=mode)
        steps = []
        if mode == "consumer":
            b = None
            while True:
                t0 = clock()
                if b is not None:
                    b.release()
                try:
                    b = source.next(timeout=30)
                except tsock.EndOfStream:
                    break
                steps.append(clock() - t0)
                step(step_s)
        else:
            for _ in range(epochs):
                it = iter(source)
                while True:
                    t0 = clock()
                    try:
                        next(it)
                    except StopIteration:
                        break
                    steps.append(clock() - t0)
                    step(step_s)
        source.close()
        prod.wait(timeout=60)
    finally:
        if prod.poll() is None:
            prod.kill()
            prod.wait()
    steps.sort()
    return {"batches": len(steps), "loader_us_p50": percentile(steps, 0.5) / 1e3,
            "loader_us_p99": percentile(steps, 0.99) / 1e3,
            "loader_us_mean": statistics.fmean(steps) / 1e3}


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
    ap.add_argument("--step-batches", type=int, default=3000)
    ap.add_argument("--step-ms", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    batches_per_epoch = -(-args.samples_per_epoch // args.batch_size)
    epochs = max(1, args.batches // batches_per_epoch)
    step_epochs = max(1, args.step_batches // batches_per_epoch)
    modes = ["c", "consumer", "numpy"]
    if tsock._views.get_torch() is not None:
        modes.append("torch")
    names = {"c": "c_consumer", "consumer": "python_consumer",
             "numpy": "python_dataloader_numpy", "torch": "python_dataloader_torch"}
    kinds = ("sleep", "busy")
    raw_step = {(m, k): [] for m in modes for k in kinds}
    raw_sat = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="tsock-bench-", dir="/tmp") as d:
        for rep in range(args.repeat):
            for m in modes:  # interleaved, so drifts of the machine hit every mode alike
                for k in kinds:
                    ep = f"ipc://{d}/{m}{rep}{k}.sock"
                    if m == "c":
                        if k == "busy":
                            continue  # tsock-consume only sleeps
                        r = run_c(args, ep, step_epochs, args.step_ms)
                        raw_step[m, k].append({"batches": r["batches"],
                                               "loader_us_p50": r["step_us_p50"],
                                               "loader_us_p99": r["step_us_p99"]})
                    else:
                        raw_step[m, k].append(
                            run_python_step(args, ep, step_epochs, m, args.step_ms, k))
                ep = f"ipc://{d}/{m}{rep}f.sock"
                if m == "c":
                    raw_sat[m].append(run_c(args, ep, epochs))
                else:
                    raw_sat[m].append(run_python(args, ep, epochs, m))
    step = {k: {names[m]: median_run(raw_step[m, k]) for m in modes if raw_step[m, k]}
            for k in kinds}
    sat = {names[m]: median_run(raw_sat[m]) for m in modes}
    c_step, c_sat = step["sleep"]["c_consumer"], sat["c_consumer"]
    overhead = {}
    for m in modes[1:]:
        n = names[m]
        overhead[n] = {
            "step_sleep_p50_us": step["sleep"][n]["loader_us_p50"] - c_step["loader_us_p50"],
            "step_sleep_p99_us": step["sleep"][n]["loader_us_p99"] - c_step["loader_us_p99"],
            "step_busy_p50_us": step["busy"][n]["loader_us_p50"] - c_step["loader_us_p50"],
            "step_busy_p99_us": step["busy"][n]["loader_us_p99"] - c_step["loader_us_p99"],
            "saturated_busy_us": sat[n]["busy_us_per_batch"] - c_sat["busy_us_per_batch"],
            "saturated_cpu_us": sat[n]["cpu_us_per_batch"] - c_sat["cpu_us_per_batch"],
        }
    worst = max(max(v["step_sleep_p50_us"], v["step_busy_p50_us"]) for v in overhead.values())
    out = {
        "benchmark": "python_overhead",
        "library": tsock.library_path,
        "library_version": tsock.library_version,
        "python": sys.version.split()[0],
        "numpy": tsock._views.np.__version__,
        "torch": getattr(tsock._views.get_torch(), "__version__", None),
        "cpus": os.cpu_count(),
        "config": {"batch_size": args.batch_size, "image_size": args.image_size,
                   "slots": args.slots, "step_ms": args.step_ms,
                   "step_batches": step_epochs * batches_per_epoch,
                   "saturated_batches": epochs * batches_per_epoch,
                   "repeat": args.repeat, "statistic": "median of repeats"},
        "step": step,
        "saturated": sat,
        "overhead_vs_c": overhead,
        "target_us": 50.0,
        "worst_step_p50_overhead_us": worst,
        "meets_target": worst <= 50.0,
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
