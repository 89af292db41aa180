#!/usr/bin/env python3
"""Throughput of a running consumer beside a peer that pauses between its epochs.

Consumer A reads a fixed number of epochs with a simulated training step (tsock-consume
--delay-ms, 1 ms by default) and its batch receive times are traced. Its throughput is taken
between its first and last batch. Scenarios, each run --repeat times (3) in one invocation with
the same programs:

  alone               A is the only consumer.
  paused_peer         B reads too (no step) and lingers --pause-ms (2000) after each of its
                      epochs, like validation; with the library's default epoch grace (100 ms)
                      it is paused after that and holds no slot until its next epoch.
  paused_peer_grace0  the same with B's --epoch-grace-ms 0: paused at once.
  running_peer        B reads continuously (no pause), for reference.

If a lingering peer kept its slots, A would stall for the whole pause, every time: its
throughput would fall by about pause / (pause + epoch time). The figures show what a pausing
peer really costs A.

    python3 benchmarks/pause_bench.py [--bin-dir build/normal/producer] [--repeat 3]

Prints one JSON object with the medians (and every run). Not a test: figures go to the docs
and issue notes.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIOS = ("alone", "paused_peer", "paused_peer_grace0", "running_peer")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin-dir", default=os.path.join(REPO, "build", "normal", "producer"),
                    help="folder with tsock-producer and tsock-consume")
    ap.add_argument("--producer", help="path of tsock-producer (default: in --bin-dir)")
    ap.add_argument("--consume", help="path of tsock-consume (default: in --bin-dir)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--samples", type=int, default=4096, help="dataset size")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=60, help="epochs consumer A reads")
    ap.add_argument("--delay-ms", type=int, default=1, help="A's simulated training step")
    ap.add_argument("--pause-ms", type=int, default=2000, help="B's pause between epochs")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS),
                    help="comma-separated subset of " + ", ".join(SCENARIOS))
    args = ap.parse_args()
    args.producer = args.producer or os.path.join(args.bin_dir, "tsock-producer")
    args.consume = args.consume or os.path.join(args.bin_dir, "tsock-consume")
    args.scenarios = [s for s in args.scenarios.split(",") if s]
    for s in args.scenarios:
        if s not in SCENARIOS:
            ap.error(f"unknown scenario {s!r}")
    for prog in (args.producer, args.consume):
        if not os.access(prog, os.X_OK):
            ap.error(f"{prog} is not an executable (build first, or give --bin-dir)")
    return args


def last_json(text):
    lines = [l for l in text.splitlines() if l.startswith("{")]
    if not lines:
        raise RuntimeError(f"no JSON in {text!r}")
    return json.loads(lines[-1])


def run_once(args, scenario, workdir, n):
    endpoint = f"ipc://{workdir}/bench-{scenario}-{n}.sock"
    peers = {"alone": 0}.get(scenario, 1)
    prod = subprocess.Popen(
        [args.producer, "--dataset", "synthetic", "--endpoint", endpoint, "--samples",
         str(args.samples), "--batch-size", str(args.batch_size), "--slots", str(args.slots),
         "--image-size", str(args.image_size), "--epochs", "0", "--wait-consumers",
         str(1 + peers), "--quiet"], stdin=subprocess.DEVNULL)
    procs = [prod]
    try:
        common = [args.consume, "--endpoint", endpoint, "--samples", str(args.samples),
                  "--json", "--quiet"]
        peer = None
        if peers:
            extra = ["--epochs", "0"]  # until stopped
            if scenario.startswith("paused_peer"):
                extra += ["--pause-between-epochs-ms", str(args.pause_ms)]
            if scenario == "paused_peer_grace0":
                extra += ["--epoch-grace-ms", "0"]
            peer = subprocess.Popen(common + ["--name", "B"] + extra, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, text=True)
            procs.append(peer)
        a = subprocess.run(common + ["--name", "A", "--epochs", str(args.epochs), "--delay-ms",
                                     str(args.delay_ms), "--trace-times"],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=600)
        res = last_json(a.stdout)
        if a.returncode != 0:
            raise RuntimeError(f"consumer A exit code {a.returncode}: {res.get('error')} "
                               f"{a.stderr}")
        peer_res = None
        if peer:
            peer.send_signal(signal.SIGTERM)
            out, _ = peer.communicate(timeout=30)
            peer_res = last_json(out)
            for key in ("content_errors", "duplicates", "missing"):
                if peer_res[key]:
                    raise RuntimeError(f"peer B: {key} = {peer_res[key]}")
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
    times = res["batch_times_s"]
    span = times[-1] - times[0]
    batches = len(times) - 1  # batches received after the first one, over `span`
    samples = res["samples"] - res["batch_size"]  # only the first batch is left out
    gaps = [b - a for a, b in zip(times, times[1:])]
    typical = statistics.median(gaps)
    run = {
        "batches_per_s": batches / span,
        "samples_per_s": samples / span,
        "span_s": span,
        "batches": res["batches"],
        "wait_s": res["wait_s"],
        "next_p99_us": res["next_latency_us"]["p99"],
        "next_max_us": res["next_latency_us"]["max"],
        # The longest gap between two of A's batches: a stall shows up here.
        "longest_gap_ms": 1000 * max(gaps),
        # Time lost in gaps over 10 times the typical one (stalls), beyond the typical gap.
        "stalls": sum(1 for g in gaps if g > 10 * typical),
        "stalled_ms": 1000 * sum(g - typical for g in gaps if g > 10 * typical),
    }
    if peer_res:
        run["peer_epochs"] = peer_res["epochs"]
        run["peer_batches"] = peer_res["batches"]
    return run


def median_of(runs, key):
    return statistics.median(r[key] for r in runs)


def main():
    args = parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="tsock-pause-bench-") as workdir:
        os.chmod(workdir, 0o700)
        for n in range(args.repeat):  # interleaved, so drift of the machine hits every scenario
            for scenario in args.scenarios:
                results.setdefault(scenario, []).append(run_once(args, scenario, workdir, n))
    out = {
        "benchmark": "pause_bench",
        "config": {"samples": args.samples, "batch_size": args.batch_size,
                   "slots": args.slots, "image_size": args.image_size, "epochs_a": args.epochs,
                   "delay_ms_a": args.delay_ms, "pause_ms_b": args.pause_ms,
                   "repeat": args.repeat, "cpus": os.cpu_count()},
        "median": {},
        "runs": results,
    }
    for scenario, runs in results.items():
        m = {k: median_of(runs, k) for k in ("batches_per_s", "samples_per_s",
                                              "longest_gap_ms", "stalls", "stalled_ms",
                                              "next_p99_us")}
        if "peer_epochs" in runs[0]:
            m["peer_epochs"] = median_of(runs, "peer_epochs")
        out["median"][scenario] = m
    if "alone" in out["median"]:
        base = out["median"]["alone"]["batches_per_s"]
        for scenario, m in out["median"].items():
            m["relative_to_alone"] = m["batches_per_s"] / base
    json.dump(out, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
