#!/usr/bin/env python3
"""What converting once on a host ring costs the producer (tsock-producer --output float32
--layout nchw --normalize without --device): the producer's throughput serving one consumer,
uint8 NHWC against the converted float32 NCHW, alternating in one invocation (--repeat rounds)
so that the machine's load affects both alike. The conversion runs in tsock_producer_publish on
the producer's publishing thread (the GPU kernel's C reference), after the workers filled the
uint8 staging slot.

    python3 benchmarks/host_convert_bench.py [--bin-dir build/normal/producer] [--repeat 3]
        [--out docs/benchmarks/host_convert.json]

Prints one JSON object: medians of samples/s per mode, their ratio, every run, the machine
(load included) and the commit. Not a test.
"""
import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

MODES = {"uint8_nhwc": [], "float32_nchw_normalized": ["--output", "float32", "--layout", "nchw",
                                                       "--normalize"]}


def run_once(args, extra, tmp, tag):
    endpoint = f"ipc://{tmp}/{tag}.sock"
    stats = os.path.join(tmp, f"{tag}.json")
    pcmd = [args.producer, "--dataset", "synthetic", "--endpoint", endpoint, "--samples",
            str(args.samples), "--image-size", str(args.image_size), "--batch-size",
            str(args.batch_size), "--slots", "8", "--epochs", str(args.epochs),
            "--wait-consumers", "1", "--quiet", "--stats-json", stats, *extra]
    ccmd = [args.consume, "--endpoint", endpoint, "--epochs", str(args.epochs), "--samples",
            str(args.samples), "--content", "images", "--no-digest", "--json", "--quiet"]
    st, _ = benchlib.serve_and_consume(pcmd, ccmd, stats, consume_timeout=600)
    return {"samples": st["samples"], "wall_s": st["wall_s"], "cpu_s": st["cpu_s"],
            "samples_per_s": st["samples"] / st["wall_s"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin-dir", default=os.path.join(benchlib.REPO, "build", "normal",
                                                      "producer"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--samples", type=int, default=1024)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--out")
    args = ap.parse_args()
    args.producer = os.path.join(args.bin_dir, "tsock-producer")
    args.consume = os.path.join(args.bin_dir, "tsock-consume")
    result = {"benchmark": "host_convert", "commit": benchlib.git_commit(),
              "machine": benchlib.machine(), "samples": args.samples, "epochs": args.epochs,
              "batch_size": args.batch_size, "image_size": args.image_size,
              "command": " ".join(sys.argv), "runs": {m: [] for m in MODES}}
    with tempfile.TemporaryDirectory(prefix="tsock-convert-bench-") as tmp:
        for r in range(args.repeat):
            for mode, extra in MODES.items():
                result["runs"][mode].append(run_once(args, extra, tmp, f"{mode}-{r}"))
    med = {m: statistics.median(x["samples_per_s"] for x in runs)
           for m, runs in result["runs"].items()}
    result["median_samples_per_s"] = med
    result["ratio_converted_to_uint8"] = med["float32_nchw_normalized"] / med["uint8_nhwc"]
    result["load_avg_at_end"] = os.getloadavg()
    benchlib.emit(result, args.out)


if __name__ == "__main__":
    main()
