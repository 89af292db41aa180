#!/usr/bin/env python3
"""What a resumed consumer costs, against starting a fresh epoch, measured in one run.

    python3 benchmarks/resume_bench.py [--build build] [--samples 20000] [--image-size 64]
                                       [--repeats 3] [--out FILE.json]

One tsock-producer (synthetic dataset: the producer computes every image byte, so its CPU time
is real work per sample) serves one job at a time. For each fraction f of an epoch already
delivered (0: a fresh epoch; 0.1, 0.5, 0.9: a consumer restored from a state saved after f of
its epoch), a saver consumer reads f of its epoch and saves its state; then the measured
consumer (restored from that state, or fresh for f = 0) reads until its epoch ends. Measured
for that last part: wall time, time to its first batch, the producer's CPU time (utime +
stime from /proc), and the samples the producer published meanwhile (its stream) against the
samples delivered. A restored consumer takes its remaining samples from the shared stream as
it passes, so the stream it needs is one window whatever f is: the producer does no extra
decoding, but the job waits about as long as for a fresh epoch to get its (1 - f) share.
Prints and writes JSON with the commit, date and machine.
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

import benchlib

sys.path.insert(0, os.path.join(benchlib.REPO, "bindings", "python"))


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def published(tsock, endpoint):
    return tsock.query_stats(endpoint)["producer"]["samples"]


def measure(tsock, endpoint, pid, fraction, batch, samples):
    state = None
    if fraction > 0:
        with tsock.Consumer(endpoint, batch_size=batch, checkpointing=True) as saver:
            for _ in range(int(samples * fraction) // batch):
                saver.release(saver.next())
            state = saver.save_state()
    time.sleep(0.3)  # the saver's slots are back; the producer idles at a full ring
    cpu0, stream0, t0 = cpu_s(pid), published(tsock, endpoint), time.monotonic()
    first, delivered = None, 0
    with tsock.Consumer(endpoint, batch_size=batch, state=state) as c:
        while True:
            b = c.next(timeout=60)
            if first is None:
                first = time.monotonic() - t0
            delivered += b.samples
            end = b.epoch_end
            c.release(b)
            if end:
                break
        wall = time.monotonic() - t0
        cpu = cpu_s(pid) - cpu0
        stream = published(tsock, endpoint) - stream0
    return {"fraction_saved": fraction, "wall_s": wall, "first_batch_s": first,
            "producer_cpu_s": cpu, "delivered": delivered, "stream_samples": stream,
            "state_bytes": len(state) if state else 0}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(benchlib.REPO, "build"))
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    os.environ.setdefault("TSOCK_LIBRARY", os.path.join(args.build, "libtsock", "libtsock.so"))
    import tsock

    d = tempfile.mkdtemp(prefix="tsock-resume-bench-")
    endpoint = f"ipc://{d}/p.sock"
    producer = subprocess.Popen(
        [os.path.join(args.build, "producer", "tsock-producer"), "--dataset", "synthetic",
         "--endpoint", endpoint, "--samples", str(args.samples), "--image-size",
         str(args.image_size), "--batch-size", str(args.batch), "--slots", "8", "--epochs",
         "0", "--quiet"], stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not os.path.exists(f"{d}/p.sock"):
            if time.monotonic() > deadline:
                raise SystemExit("the producer did not start")
            time.sleep(0.05)
        runs = []
        for r in range(args.repeats):
            for f in (0.0, 0.1, 0.5, 0.9):
                m = measure(tsock, endpoint, producer.pid, f, args.batch, args.samples)
                m["repeat"] = r
                runs.append(m)
                print(json.dumps(m), flush=True)
    finally:
        producer.send_signal(signal.SIGTERM)
        producer.wait(10)

    summary = []
    for f in (0.0, 0.1, 0.5, 0.9):
        sel = [m for m in runs if m["fraction_saved"] == f]
        med = {k: statistics.median(m[k] for m in sel)
               for k in ("wall_s", "first_batch_s", "producer_cpu_s", "delivered",
                         "stream_samples", "state_bytes")}
        med["fraction_saved"] = f
        summary.append(med)
    fresh = summary[0]
    for s in summary:
        s["wall_vs_fresh"] = s["wall_s"] / fresh["wall_s"]
        s["producer_cpu_vs_fresh"] = (s["producer_cpu_s"] / fresh["producer_cpu_s"]
                                      if fresh["producer_cpu_s"] else None)
    out = {"benchmark": "resume_bench", "commit": benchlib.git_commit(),
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "machine": benchlib.machine(), "load_avg_at_end": os.getloadavg(),
           "config": vars(args), "summary": summary, "runs": runs}
    text = json.dumps(out, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    for s in summary:
        print(f"saved {s['fraction_saved']:.0%}: {s['delivered']:.0f} delivered from "
              f"{s['stream_samples']:.0f} stream samples in {s['wall_s']:.2f} s "
              f"(first batch {s['first_batch_s'] * 1000:.0f} ms), producer CPU "
              f"{s['producer_cpu_s']:.2f} s = {s['producer_cpu_vs_fresh'] or 0:.2f}x a fresh epoch")


if __name__ == "__main__":
    main()
