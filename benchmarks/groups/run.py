#!/usr/bin/env python3
"""Groups: one tsock producer feeding a 4-rank data-parallel job plus 2 solo jobs, against the
same six jobs each loading their own data with torchvision (the ranks through
DistributedSampler), in one run, on one tsock-mkdataset tree of JPEGs (issue 14).

  tsock        one tsock-producer (--workers = CPUs, the train preset: RandomResizedCrop 224
               and flips), 4 Python jobs reading as ranks 0..3 of one group
               (tsock.DataLoader(group=...)) and 2 solo Python jobs (tsock.DataLoader)
  torchvision  4 Python jobs with ImageFolder + DataLoader(sampler=DistributedSampler(
               num_replicas=4, rank=r), set_epoch each epoch) and 2 with ImageFolder +
               DataLoader(shuffle=True); RandomResizedCrop(224) + RandomHorizontalFlip() +
               PILToTensor(); num_workers = max(1, CPUs // 6) each

Every job is benchmarks/collocation/job.py: it touches each batch and sleeps --delay-ms per
batch (a training step that costs no CPU). Per epoch the four ranks together receive the
dataset once and each solo job receives it once: three datasets' worth of images delivered
per epoch, which torchvision decodes three times and tsock once. The ranks do no collective
(no torch.distributed): this measures the loading, which is the same with or without DDP.

Per configuration: images/s (all images delivered to all jobs / the span from the first batch
to the last, over all jobs), CPU ms per delivered image (all the configuration's CPU, reaped
with getrusage(RUSAGE_CHILDREN), / images delivered), and the same without the Python jobs'
one-off start and shut-down costs ("steady"; see benchmarks/collocation/run.py, whose
orchestration this reuses). The configurations alternate --repeat times; medians and spread.

    python3 benchmarks/groups/run.py [--images 800] [--epochs 2] [--repeat 3]

Writes docs/benchmarks/groups.json (--out) and prints a table.
"""
import argparse
import importlib.util
import json
import os
import resource
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
import benchlib  # noqa: E402  (benchmarks/benchlib.py)

_spec = importlib.util.spec_from_file_location(
    "collocation_run", os.path.join(os.path.dirname(HERE), "collocation", "run.py"))
colloc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(colloc)

CONFIGS = ("tsock", "torchvision")
RANKS, SOLOS = 4, 2
TIMEOUT_S = 900


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    benchlib.add_tree_args(ap)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=2, help="epochs each job reads (2)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--delay-ms", type=int, default=10,
                    help="simulated training step per batch, by sleeping (10)")
    ap.add_argument("--cpus", type=int, default=os.cpu_count(),
                    help="the producer's --workers; each torchvision job gets "
                         "max(1, cpus // 6) workers (default: all cores)")
    ap.add_argument("--bin-dir", default=os.path.join(REPO, "build", "producer"))
    ap.add_argument("--library", default=os.environ.get(
        "TSOCK_LIBRARY", os.path.join(REPO, "build", "libtsock", "libtsock.so")))
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help="a subset of " + ", ".join(CONFIGS) + " (ratios need both)")
    ap.add_argument("--out", default=os.path.join(REPO, "docs", "benchmarks", "groups.json"))
    args = ap.parse_args()
    args.configs = tuple(c for c in CONFIGS if c in args.configs.split(","))
    if not args.configs:
        ap.error(f"--configs: none of {', '.join(CONFIGS)}")
    if args.repeat < 1 or args.epochs < 1 or args.cpus < 1:
        ap.error("--repeat, --epochs and --cpus must be at least 1")
    benchlib.find_programs(ap, args)
    if not os.path.exists(args.library):
        ap.error(f"{args.library}: no libtsock (build first, or give --library)")
    # What collocation's helpers read.
    args.device, args.model, args.persistent_workers = "cpu", "none", False
    return args


def run_config(args, config, root, workdir, env, tag):
    """Runs the six jobs (and the producer) of one configuration; returns its figures."""
    procs, jobs = [], []
    gate = colloc.Gate(workdir, tag)
    workers = max(1, args.cpus // (RANKS + SOLOS))
    endpoint = f"ipc://{workdir}/{tag}.sock"
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    producer = stats = None
    try:
        for i in range(RANKS + SOLOS):
            name = f"rank{i}" if i < RANKS else f"solo{i - RANKS}"
            if config == "tsock":
                argv = colloc.job_argv(args, "tsock", name, gate, endpoint=endpoint)
            else:
                argv = colloc.job_argv(args, "torchvision", name, gate, root=root,
                                       workers=workers)
            if i < RANKS:
                argv += ["--group", "ddp", "--rank", str(i), "--world-size", str(RANKS)]
            j = colloc.Proc("job", argv, workdir, f"{tag}-{name}", env)
            procs.append(j)
            jobs.append((name, j))
        gate.wait_ready(procs)
        if config == "tsock":
            stats = os.path.join(workdir, f"{tag}-producer.jsonl")
            producer = colloc.Proc("producer", colloc.producer_argv(
                args, root, endpoint, args.cpus, RANKS + SOLOS, stats), workdir,
                f"{tag}-producer", env)
            procs.append(producer)
        gate.open()
        colloc.wait_all(procs, TIMEOUT_S)
    finally:
        for p in procs:
            p.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_total = colloc.cpu_of(after) - colloc.cpu_of(before)
    results = []
    for name, j in jobs:
        r = colloc.job_result(j.stdout())
        r["name"] = name
        r["cpu_s"] = j.cpu_s
        r["fixed_cpu_s"] = r["startup_cpu_s"] + max(0.0, j.cpu_s - r["reported_cpu_s"])
        if r["epochs"] != args.epochs:
            raise RuntimeError(f"{config}: {name} read {r['epochs']} epochs, not {args.epochs}")
        results.append(r)
    ranks = [r for r in results if r["name"].startswith("rank")]
    if len({r["samples"] for r in ranks}) != 1:
        raise RuntimeError(f"{config}: the ranks received different counts: "
                           f"{[r['samples'] for r in ranks]}")
    prod = None
    if producer is not None:
        with open(stats) as f:
            final = json.loads([line for line in f if line.strip()][-1])
        if final.get("type") != "final" or not final.get("finished"):
            raise RuntimeError(f"{config}: the producer did not finish: {final}")
        prod = {"cpu_s": producer.cpu_s, "samples_decoded": final["samples"],
                "decode_s": final["pipeline"]["decode_s"],
                "bad_files": final["pipeline"]["bad_files"]}
    samples = sum(r["samples"] for r in results)
    span = max(r["last_batch_t"] for r in results) - min(r["first_batch_t"] for r in results)
    fixed = sum(r["fixed_cpu_s"] for r in results)
    return {"config": config, "samples_delivered": samples,
            "samples_per_rank": ranks[0]["samples"], "span_s": span,
            "images_per_s": samples / span, "cpu_s": cpu_total,
            "cpu_ms_per_image": 1e3 * cpu_total / samples,
            "steady_cpu_ms_per_image": 1e3 * (cpu_total - fixed) / samples,
            "python_fixed_cpu_s": fixed, "loader_workers_per_job": (
                args.cpus if config == "tsock" else workers),
            "load_avg_1min_before": load, "producer": prod, "jobs": results}


def main():
    args = parse_args()
    env = colloc.child_env(args)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    info = colloc.machine()
    runs = {c: [] for c in args.configs}
    with tempfile.TemporaryDirectory(prefix="tsock-groups-") as workdir:
        if args.root:
            root, tree = args.root, {"root": args.root}
        else:
            root, tree = colloc.make_tree(args, workdir)
        for rep in range(args.repeat):
            for config in (args.configs if rep % 2 == 0 else args.configs[::-1]):
                r = run_config(args, config, root, workdir, env, f"{config}{rep}")
                runs[config].append(r)
                print(f"[{rep}] {config:<11} {r['images_per_s']:8.1f} images/s  "
                      f"{r['cpu_ms_per_image']:6.2f} CPU ms/image (steady "
                      f"{r['steady_cpu_ms_per_image']:.2f})", file=sys.stderr, flush=True)
    summary = {}
    for config, rs in runs.items():
        summary[config] = {k: colloc.spread([r[k] for r in rs]) for k in (
            "images_per_s", "cpu_ms_per_image", "steady_cpu_ms_per_image", "cpu_s", "span_s")}
    ratio = None
    if len(summary) == len(CONFIGS):
        ratio = {k: summary["torchvision"][k]["median"] / summary["tsock"][k]["median"]
                 for k in ("cpu_ms_per_image", "steady_cpu_ms_per_image")}
        ratio["images_per_s"] = (summary["tsock"]["images_per_s"]["median"]
                                 / summary["torchvision"]["images_per_s"]["median"])
    out = {"benchmark": "groups", "command": " ".join(sys.argv),
           "commit": benchlib.git_commit(), "date": started, "machine": info,
           "load_avg_at_end": os.getloadavg(), "tree": tree,
           "parameters": {"ranks": RANKS, "solo_jobs": SOLOS, "epochs": args.epochs,
                          "batch_size": args.batch_size, "slots": args.slots,
                          "delay_ms": args.delay_ms, "cpus": args.cpus,
                          "repeat": args.repeat},
           "summary": summary,
           "torchvision_over_tsock": ratio, "runs": runs}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"medians of {args.repeat}; {RANKS} ranks + {SOLOS} solo jobs, {args.epochs} epochs "
          f"each, batch {args.batch_size}, step {args.delay_ms} ms")
    print(f"{'configuration':<12} {'images/s':>9} {'CPU ms/img':>11} {'steady':>8}")
    for config in args.configs:
        s = summary[config]
        print(f"{config:<12} {s['images_per_s']['median']:9.1f} "
              f"{s['cpu_ms_per_image']['median']:11.2f} "
              f"{s['steady_cpu_ms_per_image']['median']:8.2f}")
    if ratio is not None:
        print(f"torchvision / tsock CPU per image: {ratio['cpu_ms_per_image']:.2f} (steady "
              f"{ratio['steady_cpu_ms_per_image']:.2f}); tsock / torchvision images/s: "
              f"{ratio['images_per_s']:.2f}")
    print(f"wrote {args.out}")
    benchlib.warn_fallback(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
