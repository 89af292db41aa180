#!/usr/bin/env python3
"""Sampler-mode stream throughput, before against after: two builds of tsock-producer and
tsock-consume run alternately in one invocation (same machine, same load). One producer of
tiny synthetic images (so that the per-batch path dominates: messages, ids, bitmaps) serves one
tsock-consume reading --epochs epochs; the figure is the producer's samples per second.

Written for issue 22: a solo consumer now asks for every BATCH's sample ids (HELLO
IDS_IF_ABLE, 4 bytes a sample) and keeps a bitmap of its epoch, so that it can leave an epoch
early; this measures what that costs a consumer that reads everything.

    python3 benchmarks/stream_ab.py --before OLD/build/producer --after build/normal/producer \\
        [--rounds 5] [--out docs/benchmarks/stream_ab.json]
"""
import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402


def run_once(bin_dir, args, tmp, tag):
    endpoint = f"ipc://{tmp}/{tag}.sock"
    stats = os.path.join(tmp, f"{tag}.json")
    pcmd = [os.path.join(bin_dir, "tsock-producer"), "--dataset", "synthetic", "--endpoint",
            endpoint, "--samples", str(args.samples), "--image-size", "4", "--batch-size",
            str(args.batch_size), "--slots", "8", "--epochs", str(args.epochs),
            "--wait-consumers", "1", "--quiet", "--stats-json", stats]
    ccmd = [os.path.join(bin_dir, "tsock-consume"), "--endpoint", endpoint, "--epochs",
            str(args.epochs), "--samples", str(args.samples), "--json", "--quiet"]
    st, cons = benchlib.serve_and_consume(pcmd, ccmd, stats, consume_timeout=600)
    res = benchlib.last_json(cons.stdout)
    if res.get("duplicates") or res.get("missing"):
        raise RuntimeError(f"{tag}: inexact epochs {res}")
    return st["samples"] / st["wall_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="folder with the old tsock-producer/consume")
    ap.add_argument("--after", required=True, help="folder with the new ones")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--samples", type=int, default=65536)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--out")
    args = ap.parse_args()
    runs = {"before": [], "after": []}
    loads = []
    with tempfile.TemporaryDirectory(prefix="tsock-stream-ab-") as tmp:
        for r in range(args.rounds):
            order = ("before", "after") if r % 2 == 0 else ("after", "before")
            for which in order:
                loads.append(os.getloadavg())
                runs[which].append(run_once(getattr(args, which), args, tmp, f"{which}{r}"))
    med = {k: statistics.median(v) for k, v in runs.items()}
    result = {"benchmark": "stream_ab", "command": " ".join(sys.argv),
              "commit": benchlib.git_commit(), "machine": benchlib.machine(),
              "samples": args.samples, "epochs": args.epochs, "batch_size": args.batch_size,
              "samples_per_s": runs, "median_samples_per_s": med,
              "ratio_after_to_before": med["after"] / med["before"], "load_avg_per_run": loads}
    benchlib.emit(result, args.out)


if __name__ == "__main__":
    main()
