#!/usr/bin/env python3
"""Handoff benchmark, before against after: two builds of tsock-bench-handoff run alternately
in one invocation, so that both see the same machine and the same load.

    python3 benchmarks/handoff_ab.py --before OLD/build/benchmarks/tsock-bench-handoff \\
        --after build/benchmarks/tsock-bench-handoff [--rounds 5] [--consumers 1,4] \\
        [--batches 20000] [--slots 8,2] [--out docs/benchmarks/handoff_ab.json]

Each round runs, for every slot count and consumer count, both binaries once (--repeat 1), the order of the
two alternating from round to round. Reported per binary and consumer count: the medians over
the rounds of `next` p50 and p99, handoff p50 and p99 and batches/s per consumer (the slowest
consumer's, as tsock-bench-handoff reports them), and the ratios after / before of those
medians. tsock-bench-handoff prints latencies to 0.1 us: with 8 slots `next` p50 is about that
(the batch is already there), so its ratio says nothing; with 2 slots `next` waits for the
producer and its p50 is tens of microseconds. The load average is recorded before every run. Standard library only.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

FIGURES = (("next_p50_us", ("next_latency_us", "p50")), ("next_p99_us", ("next_latency_us", "p99")),
           ("handoff_p50_us", ("handoff_latency_us", "p50")),
           ("handoff_p99_us", ("handoff_latency_us", "p99")),
           ("batches_per_s", ("batches_per_s_per_consumer",)))


def commit_of(binary):
    """The commit of the checkout a binary was built in (its build folder's parent)."""
    d = os.path.dirname(os.path.abspath(binary))
    r = subprocess.run(["git", "-C", d, "rev-parse", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or None


def run_once(binary, slots, consumers, args):
    cmd = [binary, "--consumers", str(consumers), "--batches", str(args.batches), "--slots",
           str(slots), "--repeat", "1"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr[-500:]}")
    text = r.stdout
    res = json.loads(text[text.index("{"):])["results"][0]
    out = {}
    for name, path in FIGURES:
        v = res
        for key in path:
            v = v[key]
        out[name] = v
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True, help="tsock-bench-handoff of the old build")
    ap.add_argument("--after", required=True, help="tsock-bench-handoff of the new build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--consumers", default="1,4")
    ap.add_argument("--batches", type=int, default=20000)
    ap.add_argument("--slots", default="8,2")
    ap.add_argument("--out", help="write the JSON here too")
    args = ap.parse_args()
    for b in (args.before, args.after):
        if not os.access(b, os.X_OK):
            ap.error(f"{b} is not an executable")
    counts = [(s, int(k)) for s in map(int, args.slots.split(","))
              for k in args.consumers.split(",")]
    bins = {"before": args.before, "after": args.after}
    runs = {(w, k): [] for w in bins for k in counts}
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    machine = benchlib.machine()
    log = []
    for rnd in range(args.rounds):
        order = ("before", "after") if rnd % 2 == 0 else ("after", "before")
        for k in counts:
            for which in order:
                load = os.getloadavg()
                res = run_once(bins[which], k[0], k[1], args)
                runs[(which, k)].append(res)
                log.append({"round": rnd, "build": which, "slots": k[0], "consumers": k[1],
                            "load_avg": load, **res})
                print(f"round {rnd} {which:6} slots {k[0]} K={k[1]}: next p50 {res['next_p50_us']} us p99 "
                      f"{res['next_p99_us']} us, {res['batches_per_s']} batches/s "
                      f"(load {load[0]:.2f})", file=sys.stderr, flush=True)
    results = []
    for k in counts:
        entry = {"slots": k[0], "consumers": k[1]}
        for which in bins:
            entry[which] = {name: statistics.median(r[name] for r in runs[(which, k)])
                            for name, _ in FIGURES}
        entry["ratio_after_over_before"] = {
            name: (round(entry["after"][name] / entry["before"][name], 3)
                   if entry["before"][name] else None) for name, _ in FIGURES}
        results.append(entry)
    summary = {"benchmark": "handoff_ab", "date": started, "machine": machine,
               "load_avg_at_end": os.getloadavg(),
               "before": {"binary": args.before, "commit": commit_of(args.before)},
               "after": {"binary": args.after, "commit": commit_of(args.after)},
               "rounds": args.rounds, "batches": args.batches, "slots": args.slots,
               "statistic": "median over rounds of each run's slowest consumer",
               "results": results, "runs": log}
    if args.out:
        with open(args.out, "w") as f:
            f.write(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary))
    for e in results:
        r = e["ratio_after_over_before"]
        print(f"slots {e['slots']} K={e['consumers']}: after/before next p50 {r['next_p50_us']}, p99 "
              f"{r['next_p99_us']}, batches/s {r['batches_per_s']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
