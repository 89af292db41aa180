#!/usr/bin/env python3
"""Collocation benchmark, before against after: benchmarks/collocation/run.py with two builds,
alternated round by round in one invocation, so that both see the same machine and load.

    python3 benchmarks/collocation_ab.py --before OLD_BUILD --after build/normal --root TREE \\
        [--rounds 2] [--ks 1,2] [--configs shared_c,indep_tsock] [--epochs 1] --out FILE.json

A build is a build folder of this project (its producer/ programs and libtsock.so). Each round
runs run.py once per build (--repeat 1), the order alternating from round to round. Reported per
configuration and K: every run's images/s and CPU ms per image, and the ratios after / before
of their medians. Standard library only.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

RUN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "collocation", "run.py")


def run_once(build, args, out_dir):
    cmd = [sys.executable, RUN, "--root", args.root, "--ks", args.ks, "--configs", args.configs,
           "--repeat", "1", "--epochs", str(args.epochs),
           "--bin-dir", os.path.join(build, "producer"),
           "--library", os.path.join(build, "libtsock", "libtsock.so"),
           "--out-dir", out_dir, "--no-plots"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out_dir, "collocation.json")) as f:
        return json.load(f)["runs"], cmd


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True, help="build folder of the old version")
    ap.add_argument("--after", required=True, help="build folder of the new version")
    ap.add_argument("--root", required=True, help="an ImageFolder tree (tsock-mkdataset)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ks", default="1,2")
    ap.add_argument("--configs", default="shared_c,indep_tsock")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    out = {"benchmark": "collocation_before_after",
           "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
           "commit": benchlib.git_commit(), "machine": benchlib.machine(),
           "before": os.path.abspath(args.before), "after": os.path.abspath(args.after),
           "command": " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:]), "runs": []}
    builds = [("before", args.before), ("after", args.after)]
    with tempfile.TemporaryDirectory(prefix="tsock-colo-ab-") as tmp:
        for r in range(args.rounds):
            for name, build in (builds if r % 2 == 0 else builds[::-1]):
                runs, cmd = run_once(build, args, os.path.join(tmp, f"{name}-{r}"))
                out.setdefault("run_command", " ".join(os.path.relpath(c) if os.path.exists(c)
                                                        else c for c in cmd))
                for run in runs:
                    out["runs"].append({"build": name, "round": r + 1, "config": run["config"],
                                        "k": run["k"], "images_per_s": run["images_per_s"],
                                        "cpu_ms_per_image": run["cpu_ms_per_image"]})
                print(f"round {r + 1} {name}: done", flush=True)
    out["machine"]["load_avg_at_end"] = os.getloadavg()
    summary = []
    for config in args.configs.split(","):
        for k in (int(x) for x in args.ks.split(",")):
            def med(build, key):
                return statistics.median(x[key] for x in out["runs"] if x["build"] == build
                                         and x["config"] == config and x["k"] == k)
            summary.append({"config": config, "k": k,
                            "cpu_ms_per_image_after_over_before":
                                round(med("after", "cpu_ms_per_image")
                                      / med("before", "cpu_ms_per_image"), 3),
                            "images_per_s_after_over_before":
                                round(med("after", "images_per_s")
                                      / med("before", "images_per_s"), 3)})
            print(f"{config:<12} K={k}: CPU per image after/before "
                  f"{summary[-1]['cpu_ms_per_image_after_over_before']:.3f}, images/s "
                  f"{summary[-1]['images_per_s_after_over_before']:.3f}")
    out["summary"] = summary
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
