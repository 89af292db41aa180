#!/usr/bin/env python3
"""Collocation: K training jobs on one machine, sharing one tsock producer or loading alone.

One invocation, one tsock-mkdataset tree (photographs from /usr/share/backgrounds, installed
when missing or loudly replaced by synthetic files: benchlib.setup_photos),
for K = 1, 2, 4 (--ks). Every configuration trains K jobs for --epochs epochs each; every job
touches each batch it receives and then sleeps --delay-ms per batch (a simulated training step
that costs no CPU):

  shared_c     one tsock-producer (--workers = CPUs) + K tsock-consume --content images
  shared_py    one tsock-producer (--workers = CPUs) + K Python jobs on tsock.DataLoader
  indep_tsock  K tsock-producer + tsock-consume pairs, each on its own endpoint (no sharing);
               each producer has --workers max(1, CPUs // K)
  torchvision  K Python jobs, each with its own ImageFolder + torch DataLoader
               (RandomResizedCrop(224) + RandomHorizontalFlip() + PILToTensor(): uint8, as
               tsock's train preset), num_workers = max(1, CPUs // K)

Every process of a configuration is a child of this script and is reaped by it (os.wait4), and
DataLoader workers are joined by their job, so the getrusage(RUSAGE_CHILDREN) difference
around a configuration is all the CPU it used. Per configuration:

  images/s       all images delivered to all jobs / (last batch received - first batch
                 received, over all jobs)
  CPU ms/image   all the configuration's CPU / images delivered
  CPU s/epoch    all the configuration's CPU / epochs per job (all K jobs advance one epoch)
  steady         the same without the Python jobs' one-off costs: interpreter start and
                 imports (torch, torchvision, tsock), which each job reports, and its
                 shut-down after it printed its figures (reaped CPU - reported CPU). The C
                 programs (producers, tsock-consume) are always counted whole.
  data wait      share of a job's time between its first and last batch not spent in the
                 simulated step: 1 - (batches - 1) x step / span, averaged over the jobs

Jobs start first; producers start, and Python jobs are let go, once every job has done its
imports, so that no loader gets a head start. After one untimed warm-up round (K = 1 of each
configuration), each configuration is run --repeat times (3), interleaved; medians are
reported with the spread. Targets (issue 7): shared producer, CPU per epoch at K=4 <= 1.15 x
at K=1; shared at K=4 uses >= 8 x less CPU per delivered image than 4 independent torchvision
DataLoaders. A missed target is printed, not an error: the exit status is non-zero only when
something failed to run.

    python3 benchmarks/collocation/run.py [--images 800] [--epochs 2] [--repeat 3]

--device cuda (GPU training, scripts/gpu-check.sh runs it): the shared producer is
tsock-producer --device cuda --output float16 --layout nchw --normalize (one copy per batch to
the GPU, converted there, read in place by every job); Python jobs train --models (ResNet-18,
ResNet-50: torchvision, random weights, SGD, mixed precision with torch.autocast float16) on
what they receive; torchvision jobs decode on their own workers, pin, copy and normalise on the
GPU. Every process is pinned to the first --cpus cores (a fixed number of cores for every
configuration). Figures per (model, configuration, K): images/s per job, CPU ms per image,
data wait (share of a job's time spent waiting for batches). Writes collocation_cuda.json.
With TSOCK_CUDA_SIM=1 and --models none, the GPU orchestration runs on the simulated device
(no torch, no GPU: configurations shared_c and indep_tsock, tsock-consume copying each batch
back); that checks the script, not any figure.

Writes docs/benchmarks/collocation.json and the plots collocation_cpu.png and
collocation_throughput.png (--out-dir), and prints a table.
"""
import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import benchlib  # noqa: E402  (benchmarks/benchlib.py)
from benchlib import git_commit, last_json  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.join(REPO, "build", "normal")
CONFIGS = ("shared_c", "shared_py", "indep_tsock", "torchvision")
LABELS = {
    "shared_c": "1 shared tsock producer, C consumers",
    "shared_py": "1 shared tsock producer, Python consumers",
    "indep_tsock": "K independent tsock producers (no sharing)",
    "torchvision": "K independent torchvision DataLoaders",
}
TIMEOUT_S = 600


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    benchlib.add_tree_args(ap)
    ap.add_argument("--ks", default="1,2,4", help="numbers of collocated jobs (1,2,4)")
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help="comma-separated subset of " + ", ".join(CONFIGS))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=2, help="epochs each job trains (2)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--delay-ms", type=int, default=10,
                    help="simulated training step per batch, by sleeping (10)")
    ap.add_argument("--cpus", type=int, default=os.cpu_count(),
                    help="cores the loaders may use: the shared producer's --workers; the "
                         "independent loaders get max(1, cpus // K) each (default: all)")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                    help="cpu: host shared memory, simulated step (default). cuda: GPU "
                         "training with real models (see above)")
    ap.add_argument("--models", default="resnet18,resnet50",
                    help="--device cuda: models the Python jobs train (resnet18, resnet50; "
                         "none: no training, C consumers only)")
    ap.add_argument("--persistent-workers", action="store_true",
                    help="torchvision DataLoaders keep their workers between epochs "
                         "(default: torch's default, restarted every epoch)")
    ap.add_argument("--bin-dir", default=os.path.join(BUILD, "producer"))
    ap.add_argument("--library", default=os.environ.get(
        "TSOCK_LIBRARY", os.path.join(BUILD, "libtsock", "libtsock.so")))
    ap.add_argument("--out-dir", default=os.path.join(REPO, "docs", "benchmarks"))
    ap.add_argument("--no-plots", action="store_true")
    args = ap.parse_args()
    args.ks = [int(k) for k in args.ks.split(",") if k]
    args.configs = [c for c in args.configs.split(",") if c]
    for c in args.configs:
        if c not in CONFIGS:
            ap.error(f"unknown configuration {c!r}")
    if args.repeat < 1 or args.epochs < 1 or args.cpus < 1 or any(k < 1 for k in args.ks):
        ap.error("--repeat, --epochs, --cpus and every K must be at least 1")
    benchlib.find_programs(ap, args)
    if not os.path.exists(args.library):
        ap.error(f"{args.library}: no libtsock (build first, or give --library)")
    args.models = [m for m in args.models.split(",") if m]
    args.model = "none"
    if args.device == "cuda":
        check_cuda(ap, args)
    return args


def check_cuda(ap, args):
    """--device cuda needs a GPU and torch with CUDA for model training; with
    TSOCK_CUDA_SIM=1, --models none and C consumers only, the simulated device will do."""
    for m in args.models:
        if m not in ("resnet18", "resnet50", "none"):
            ap.error(f"unknown model {m!r} (resnet18, resnet50, none)")
    if args.models == ["none"]:
        if os.environ.get("TSOCK_CUDA_SIM") != "1":
            print("run.py: --models none on a real GPU: C consumers only", file=sys.stderr)
        bad = [c for c in args.configs if c not in ("shared_c", "indep_tsock")]
        if bad:
            ap.error(f"--models none runs no Python training job: drop {bad}")
        return
    if "none" in args.models:
        ap.error("--models none cannot be mixed with models")
    bad = [c for c in args.configs if c not in ("shared_py", "torchvision")]
    if bad:
        ap.error(f"--device cuda trains models in Python jobs: configurations shared_py and "
                 f"torchvision only, not {bad}")
    try:
        import torch
    except ImportError:
        sys.exit("run.py: --device cuda: torch is not importable")
    if not torch.cuda.is_available():
        sys.exit("run.py: --device cuda: torch sees no CUDA device here (a CPU-only torch, or "
                 "no GPU); TSOCK_CUDA_SIM=1 --models none checks the orchestration only")




def child_env(args):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (os.path.join(REPO, "bindings", "python"), env.get("PYTHONPATH")) if p)
    env["TSOCK_LIBRARY"] = os.path.abspath(args.library)
    return env




def cpu_of(ru):
    return ru.ru_utime + ru.ru_stime


def machine():
    info = benchlib.machine()
    try:
        import PIL
        import torch
        import torchvision

        info.update(torch=torch.__version__, torchvision=torchvision.__version__,
                    pillow=PIL.__version__)
    except ImportError:
        pass
    return info


class Proc:
    """A child process whose output goes to a file and whose CPU time is taken when it is
    reaped (os.wait4: the process and the children it waited for)."""

    def __init__(self, role, argv, workdir, tag, env):
        self.role, self.argv = role, argv
        self.out_path = os.path.join(workdir, f"{tag}.out")
        self.err_path = os.path.join(workdir, f"{tag}.err")
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                          stderr=err, env=env)
        self.status = None
        self.cpu_s = None

    def poll(self):
        if self.status is not None:
            return True
        pid, status, ru = os.wait4(self.popen.pid, os.WNOHANG)
        if pid == 0:
            return False
        self.status = os.waitstatus_to_exitcode(status)
        self.popen.returncode = self.status  # reaped here: Popen must not wait again
        self.cpu_s = cpu_of(ru)
        return True

    def stop(self):
        if self.status is None:
            try:
                self.popen.send_signal(signal.SIGKILL)
            except ProcessLookupError:
                pass
            _, status, ru = os.wait4(self.popen.pid, 0)
            self.status = os.waitstatus_to_exitcode(status)
            self.popen.returncode = self.status
            self.cpu_s = cpu_of(ru)

    def stdout(self):
        with open(self.out_path) as f:
            return f.read()

    def stderr(self):
        with open(self.err_path) as f:
            return f.read()


def wait_all(procs, timeout):
    deadline = time.monotonic() + timeout
    try:
        while not all(p.poll() for p in procs):
            if time.monotonic() > deadline:
                raise RuntimeError(f"a configuration ran past {timeout} s")
            time.sleep(0.01)
    finally:
        for p in procs:
            p.stop()
    for p in procs:
        if p.status != 0:
            raise RuntimeError(f"{p.role} exited with {p.status}: {' '.join(p.argv)}\n"
                               f"{p.stderr()[-3000:]}{p.stdout()[-1000:]}")


# On the GPU the shared producer converts once for everyone: what a training job feeds its model.
GPU_OUTPUT = ["--device", "cuda", "--output", "float16", "--layout", "nchw", "--normalize"]


def producer_argv(args, root, endpoint, workers, consumers, stats):
    return [args.producer, "--dataset", "imagenet", "--root", root, "--split", "train",
            "--workers", str(workers), "--batch-size", str(args.batch_size), "--slots",
            str(args.slots), "--epochs", str(args.epochs), "--endpoint", endpoint,
            "--wait-consumers", str(consumers), "--stats-json", stats, "--quiet"] + (
                GPU_OUTPUT if args.device == "cuda" else [])


def consume_argv(args, endpoint, name):
    return [args.consume, "--endpoint", endpoint, "--content", "images", "--epochs",
            str(args.epochs), "--delay-ms", str(args.delay_ms), "--name", name,
            "--connect-timeout-ms", "60000", "--json", "--quiet"] + (
                ["--normalize"] if args.device == "cuda" else [])


def job_argv(args, loader, name, gate, endpoint=None, root=None, workers=None):
    argv = [sys.executable, os.path.join(HERE, "job.py"), "--loader", loader, "--name", name,
            "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
            "--delay-ms", str(args.delay_ms), "--ready-file", gate.ready(name), "--go-file",
            gate.go]
    if args.device == "cuda":
        argv += ["--device", "cuda", "--model", args.model]
    if endpoint:
        argv += ["--endpoint", endpoint]
    if root:
        argv += ["--root", root, "--workers", str(workers)]
        if args.persistent_workers:
            argv.append("--persistent-workers")
    return argv


def c_consumer_result(text):
    r = last_json(text)
    for key in ("duplicates", "missing", "label_errors", "index_errors", "layout_errors"):
        if r.get(key):
            raise RuntimeError(f"tsock-consume: {key} = {r[key]}")
    t0 = r["start_monotonic_s"]
    return {"samples": r["samples"], "first_batch_t": t0 + r["epoch_start_times_s"][0],
            "last_batch_t": t0 + r["epoch_end_times_s"][-1], "wait_s": r["wait_s"],
            "batches": r["batches"], "epochs": r["epochs"], "python": False}


def job_result(text):
    r = last_json(text)
    out = {k: r[k] for k in ("samples", "first_batch_t", "last_batch_t", "wait_s", "batches",
                             "epochs", "startup_cpu_s", "build_cpu_s", "loop_cpu_s",
                             "wait_after_first_s")}
    out["reported_cpu_s"] = r["cpu_s"]
    out["python"] = True
    return out


class Gate:
    """Start line of a configuration: each Python job creates its ready file once its imports
    are done, then waits for the go file. The producers are started, and the go file made,
    only when every job is ready (tsock-consume starts in milliseconds and simply waits for
    its producer), so no loader fills its slots or prefetches while the others import."""

    def __init__(self, workdir, tag):
        self.dir = os.path.join(workdir, f"{tag}-gate")
        os.mkdir(self.dir)
        self.go = os.path.join(self.dir, "go")
        self.names = []

    def ready(self, name):
        self.names.append(name)
        return os.path.join(self.dir, f"{name}.ready")

    def wait_ready(self, procs, timeout=120):
        deadline = time.monotonic() + timeout
        while not all(os.path.exists(os.path.join(self.dir, f"{n}.ready"))
                      for n in self.names):
            for p in procs:
                if p.poll() and p.status != 0:
                    raise RuntimeError(f"{p.role} exited with {p.status} before it was "
                                       f"ready:\n{p.stderr()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the jobs were not ready after {timeout} s")
            time.sleep(0.005)

    def open(self):
        open(self.go, "w").close()


def run_config(args, config, k, root, workdir, env, tag):
    """Runs one configuration to its end; returns its figures."""
    procs, producers, consumers = [], [], []
    gate = Gate(workdir, tag)
    split = max(1, args.cpus // k)
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    try:
        # Consumers and jobs first; producers once every job is ready (see Gate).
        if config in ("shared_c", "shared_py"):
            endpoints = [f"ipc://{workdir}/{tag}.sock"] * k
        else:
            endpoints = [f"ipc://{workdir}/{tag}-{i}.sock" for i in range(k)]
        for i in range(k):
            if config in ("shared_c", "indep_tsock"):
                role, argv = "consumer", consume_argv(args, endpoints[i], f"c{i}")
            elif config == "shared_py":
                role, argv = "consumer", job_argv(args, "tsock", f"py{i}", gate,
                                                  endpoint=endpoints[i])
            else:
                role, argv = "job", job_argv(args, "torchvision", f"tv{i}", gate, root=root,
                                             workers=split)
            c = Proc(role, argv, workdir, f"{tag}-c{i}", env)
            procs.append(c)
            consumers.append(c)
        gate.wait_ready(procs)
        if config in ("shared_c", "shared_py"):
            plan = [(endpoints[0], args.cpus, k)]
        elif config == "indep_tsock":
            plan = [(e, split, 1) for e in endpoints]
        else:
            plan = []
        for i, (endpoint, workers, waits_for) in enumerate(plan):
            stats = os.path.join(workdir, f"{tag}-producer{i}.jsonl")
            p = Proc("producer", producer_argv(args, root, endpoint, workers, waits_for, stats),
                     workdir, f"{tag}-producer{i}", env)
            procs.append(p)
            producers.append((p, stats))
        gate.open()
        wait_all(procs, TIMEOUT_S)
    finally:
        for p in procs:
            p.stop()
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_total = cpu_of(after) - cpu_of(before)

    jobs = [c_consumer_result(c.stdout()) if c.argv[0] == args.consume else job_result(c.stdout())
            for c in consumers]
    for c, j in zip(consumers, jobs):
        j["cpu_s"] = c.cpu_s
        # A Python job's one-off costs: interpreter start and imports (it reports them) and
        # its shut-down after it printed (seen only here).
        j["fixed_cpu_s"] = (j["startup_cpu_s"] + max(0.0, c.cpu_s - j["reported_cpu_s"])
                            if j["python"] else 0.0)
        span_j = j["last_batch_t"] - j["first_batch_t"]
        if args.device == "cuda" and j["python"]:
            # The step is a real model's: the share is the job's measured wait for batches.
            j["data_wait_share"] = j["wait_after_first_s"] / span_j if span_j > 0 else None
        else:
            j["data_wait_share"] = (
                max(0.0, 1 - (j["batches"] - 1) * args.delay_ms / 1e3 / span_j)
                if span_j > 0 else None)
        if j["epochs"] != args.epochs:
            raise RuntimeError(f"{config} K={k}: a job read {j['epochs']} epochs, not "
                               f"{args.epochs}")
    prod_records = []
    for p, stats in producers:
        with open(stats) as f:
            final = json.loads([l for l in f if l.strip()][-1])
        if final.get("type") != "final" or not final.get("finished"):
            raise RuntimeError(f"{config} K={k}: the producer did not finish: {final}")
        prod_records.append({"cpu_s": p.cpu_s, "self_reported_cpu_s": final["cpu_s"],
                             "samples": final["samples"], "wall_s": final["wall_s"],
                             "decode_s": final["pipeline"]["decode_s"],
                             "bad_files": final["pipeline"]["bad_files"],
                             "read_mode": final["pipeline"]["read_mode"]})
    samples = sum(j["samples"] for j in jobs)
    span = max(j["last_batch_t"] for j in jobs) - min(j["first_batch_t"] for j in jobs)
    fixed = sum(j["fixed_cpu_s"] for j in jobs)
    cpu_prod = sum(p["cpu_s"] for p in prod_records)
    cpu_cons = sum(j["cpu_s"] for j in jobs)
    steady = cpu_total - fixed
    return {
        "config": config, "k": k, "samples": samples, "span_s": span, "wall_s": wall,
        "images_per_s": samples / span,
        "cpu_s": cpu_total, "cpu_reaped_sum_s": cpu_prod + cpu_cons,
        "cpu_producers_s": cpu_prod, "cpu_jobs_s": cpu_cons, "python_fixed_cpu_s": fixed,
        "steady_cpu_s": steady,
        "cpu_ms_per_image": 1e3 * cpu_total / samples,
        "steady_cpu_ms_per_image": 1e3 * steady / samples,
        "cpu_s_per_epoch": cpu_total / args.epochs,
        "steady_cpu_s_per_epoch": steady / args.epochs,
        "producer_cpu_s_per_epoch": cpu_prod / args.epochs if producers else None,
        "data_wait_share": statistics.mean(j["data_wait_share"] or 0.0 for j in jobs),
        "loader_workers_per_job": (args.cpus if config.startswith("shared") else split),
        "load_avg_1min_before": load,
        "producers": prod_records, "jobs": jobs,
    }


def make_tree(args, workdir):
    out, summary, cmd = benchlib.make_tree(args, workdir)
    info = {k: summary.get(k) for k in ("images", "classes", "files", "total_bytes",
                                        "mean_width", "mean_height", "mean_bytes", "source",
                                        "quality", "photos_fallback")}
    info["command"] = " ".join(cmd[:1] + ["TREE"] + cmd[2:])
    return out, info


def spread(vals):
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}


SUMMARY_KEYS = ("images_per_s", "cpu_s", "steady_cpu_s", "python_fixed_cpu_s", "cpu_ms_per_image",
                "steady_cpu_ms_per_image", "cpu_s_per_epoch", "steady_cpu_s_per_epoch",
                "producer_cpu_s_per_epoch", "cpu_producers_s", "cpu_jobs_s", "wall_s",
                "data_wait_share")


def summarize(runs):
    out = {}
    for (config, k), rs in sorted(runs.items(), key=lambda kv: (CONFIGS.index(kv[0][0]),
                                                               kv[0][1])):
        entry = {"config": config, "k": k, "label": LABELS[config],
                 "loader_workers_per_job": rs[0]["loader_workers_per_job"]}
        for key in SUMMARY_KEYS:
            entry[key] = spread([r[key] for r in rs])
        out.setdefault(config, {})[str(k)] = entry
    return out


def med(summary, config, k, key):
    try:
        return summary[config][str(k)][key]["median"]
    except (KeyError, TypeError):
        return None


def targets(summary, ks):
    kmin, kmax = min(ks), max(ks)
    t = {"k_low": kmin, "k_high": kmax}
    per_epoch = {}
    for config in ("shared_c", "shared_py"):
        for key in ("cpu_s_per_epoch", "steady_cpu_s_per_epoch", "producer_cpu_s_per_epoch"):
            lo, hi = med(summary, config, kmin, key), med(summary, config, kmax, key)
            if lo and hi is not None:
                per_epoch[f"{config}.{key}"] = {"ratio": hi / lo, "holds": hi / lo <= 1.15}
    t["shared_cpu_per_epoch_k_high_over_k_low"] = {"limit": 1.15, **per_epoch}
    vs = {}
    tv_all = med(summary, "torchvision", kmax, "cpu_ms_per_image")
    tv_steady = med(summary, "torchvision", kmax, "steady_cpu_ms_per_image")
    pairs = {
        "shared_c (all CPU) vs torchvision (all CPU)": ("shared_c", "cpu_ms_per_image", tv_all),
        "shared_c (all CPU) vs torchvision (steady)": ("shared_c", "cpu_ms_per_image",
                                                       tv_steady),
        "shared_py (all CPU) vs torchvision (all CPU)": ("shared_py", "cpu_ms_per_image",
                                                         tv_all),
        "shared_py (steady) vs torchvision (steady)": ("shared_py", "steady_cpu_ms_per_image",
                                                       tv_steady),
    }
    for name, (config, key, tv) in pairs.items():
        mine = med(summary, config, kmax, key)
        if mine and tv:
            vs[name] = {"ratio": tv / mine, "holds": tv / mine >= 8}
    t["torchvision_cpu_per_image_over_shared_at_k_high"] = {"limit": 8, **vs}
    return t


def print_table(summary, args):
    print(f"medians of {args.repeat}; {args.epochs} epochs per job; step {args.delay_ms} ms "
          f"per batch of {args.batch_size}")
    head = (f"{'configuration':<13} {'K':>2} {'images/s':>9} {'CPU s':>7} {'py fixed':>8} "
            f"{'ms/img':>7} {'steady':>7} {'s/epoch':>8} {'steady':>7} {'producer':>8} {'wait':>5}")
    print(head)
    for config in CONFIGS:
        for k in args.ks:
            e = summary.get(config, {}).get(str(k))
            if not e:
                continue
            g = lambda key: e[key]["median"] if e[key] else float("nan")  # noqa: E731
            print(f"{config:<13} {k:>2} {g('images_per_s'):>9.0f} {g('cpu_s'):>7.2f} "
                  f"{g('python_fixed_cpu_s'):>8.2f} {g('cpu_ms_per_image'):>7.3f} "
                  f"{g('steady_cpu_ms_per_image'):>7.3f} {g('cpu_s_per_epoch'):>8.2f} "
                  f"{g('steady_cpu_s_per_epoch'):>7.2f} {g('producer_cpu_s_per_epoch'):>8.2f} "
                  f"{g('data_wait_share'):>5.2f}")


def print_targets(t):
    a = t["shared_cpu_per_epoch_k_high_over_k_low"]
    print(f"target: shared CPU per epoch, K={t['k_high']} / K={t['k_low']} <= {a['limit']}")
    for name, v in a.items():
        if isinstance(v, dict):
            print(f"  {name:<45} {v['ratio']:6.2f}  {'holds' if v['holds'] else 'MISSED'}")
    b = t["torchvision_cpu_per_image_over_shared_at_k_high"]
    print(f"target: torchvision / shared CPU per image at K={t['k_high']} >= {b['limit']}")
    for name, v in b.items():
        if isinstance(v, dict):
            print(f"  {name:<45} {v['ratio']:6.1f}  {'holds' if v['holds'] else 'MISSED'}")


def main_cuda(args, env):
    """--device cuda: every model x K x configuration, pinned to --cpus cores; writes
    collocation_cuda.json (one row per model, configuration and K: medians over --repeat)."""
    cores = sorted(os.sched_getaffinity(0))[:args.cpus]
    os.sched_setaffinity(0, cores)  # the children inherit it: a fixed number of cores
    out = {"benchmark": "collocation_cuda",
           "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "commit": git_commit(),
           "command": " ".join([os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:]),
           "machine": machine(), "simulated_device": os.environ.get("TSOCK_CUDA_SIM") == "1",
           "config": {"ks": args.ks, "configs": args.configs, "models": args.models,
                      "repeat": args.repeat, "epochs_per_job": args.epochs,
                      "batch_size": args.batch_size, "cpus": cores,
                      "mixed_precision": "torch.autocast(float16)"}}
    workdir = tempfile.mkdtemp(prefix="tsock-colo-", dir="/tmp")
    os.chmod(workdir, 0o700)
    rows, t_start = [], time.monotonic()
    try:
        root, out["dataset"] = ((args.root, {"root": args.root}) if args.root
                                else make_tree(args, workdir))
        for model in args.models:
            args.model = model
            for config in args.configs:  # untimed warm-up (cuDNN autotuning, page cache)
                run_config(args, config, 1, root, workdir, env, f"warm-{model}-{config}")
            runs = {}
            for n in range(args.repeat):
                for k in args.ks:
                    for config in args.configs:
                        r = run_config(args, config, k, root, workdir, env,
                                       f"{model}-{config}-{k}-{n}")
                        runs.setdefault((config, k), []).append(r)
                        print(f"[{time.monotonic() - t_start:6.0f} s] {model} {config} K={k}: "
                              f"{r['images_per_s'] / k:6.0f} images/s per job, "
                              f"{r['cpu_ms_per_image']:.3f} CPU ms/image, data wait "
                              f"{r['data_wait_share']:.1%}", flush=True)
            for (config, k), rs in sorted(runs.items()):
                rows.append({"model": model, "config": config, "k": k,
                             "images_per_s_per_job": statistics.median(
                                 r["images_per_s"] / k for r in rs),
                             "cpu_ms_per_image": statistics.median(
                                 r["cpu_ms_per_image"] for r in rs),
                             "data_wait": statistics.median(r["data_wait_share"] for r in rs),
                             "runs": rs})
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    out["duration_s"] = time.monotonic() - t_start
    out["results"] = rows
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, "collocation_cuda.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print(f"{'model':<9} {'config':<12} {'K':>2} {'img/s/job':>10} {'CPU ms/img':>10} "
          f"{'wait':>6}")
    for r in rows:
        print(f"{r['model']:<9} {r['config']:<12} {r['k']:>2} {r['images_per_s_per_job']:>10.1f} "
              f"{r['cpu_ms_per_image']:>10.3f} {r['data_wait']:>6.1%}")
    print(f"written: {path}")
    return 0


def main():
    args = parse_args()
    env = child_env(args)
    if args.device == "cuda":
        return main_cuda(args, env)
    out = {"benchmark": "collocation",
           "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
           "commit": git_commit(),
           "command": " ".join([os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:]),
           "machine": machine(),
           "config": {"ks": args.ks, "configs": args.configs, "repeat": args.repeat,
                      "epochs_per_job": args.epochs, "batch_size": args.batch_size,
                      "slots": args.slots, "delay_ms": args.delay_ms, "cpus": args.cpus,
                      "device": args.device,
                      "torchvision_persistent_workers": args.persistent_workers,
                      "shared_producer_workers": args.cpus,
                      "independent_loader_workers": {str(k): max(1, args.cpus // k)
                                                     for k in args.ks}}}
    workdir = tempfile.mkdtemp(prefix="tsock-colo-", dir="/tmp")
    os.chmod(workdir, 0o700)
    runs = {}
    t_start = time.monotonic()
    try:
        if args.root:
            root, out["dataset"] = args.root, {"root": args.root}
        else:
            root, out["dataset"] = make_tree(args, workdir)
        # Untimed warm-up: page cache of the tree and of the Python/torch files.
        for config in args.configs:
            run_config(args, config, 1, root, workdir, env, f"warm-{config}")
        for n in range(args.repeat):  # interleaved, so drift of the machine hits all alike
            for k in args.ks:
                for config in args.configs:
                    r = run_config(args, config, k, root, workdir, env, f"{config}-{k}-{n}")
                    runs.setdefault((config, k), []).append(r)
                    print(f"[{time.monotonic() - t_start:6.0f} s] repeat {n} {config:<12} "
                          f"K={k}: {r['images_per_s']:6.0f} images/s, CPU {r['cpu_s']:6.2f} s "
                          f"({r['python_fixed_cpu_s']:.2f} Python start/exit), "
                          f"{r['cpu_ms_per_image']:.3f} ms/image", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    out["machine"]["load_avg_at_end"] = os.getloadavg()
    out["duration_s"] = time.monotonic() - t_start
    out["results"] = summarize(runs)
    out["targets"] = targets(out["results"], args.ks)
    out["runs"] = [r for (_, rs) in sorted(runs.items()) for r in rs]
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, "collocation.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print_table(out["results"], args)
    print_targets(out["targets"])
    print(f"written: {path}")
    if not args.no_plots:
        write_plots(out, args.out_dir, path)
    benchlib.warn_fallback(args)
    return 0


def write_plots(out, out_dir, json_path):
    """The two plots, or one clear line saying why not: the figures are in the JSON already,
    and a missing plotting library must not end the run in a traceback."""
    try:
        import matplotlib  # noqa: F401  (plot.py imports it again, for the figures)
    except ImportError:
        print("plots skipped: matplotlib is not installed (apt-get install python3-matplotlib, "
              "or pip install matplotlib); the results are in the JSON, and "
              f"'python3 {os.path.join(HERE, 'plot.py')} {json_path}' draws them later",
              file=sys.stderr)
        return
    sys.path.insert(0, HERE)
    import plot

    for p in plot.plot(out, out_dir):
        print(f"written: {p}")


if __name__ == "__main__":
    sys.exit(main())
