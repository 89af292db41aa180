#!/usr/bin/env python3
"""Issue 20 on a GPU: decoding on the GPU (nvJPEG) versus the CPU, and collocated training at a
fixed CPU budget. scripts/gpu-check.sh --issue20 runs it; it needs a GPU and torch with CUDA.

Every process runs on the first --cpus cores (4: the cores a GPU machine gives a job; the
affinity is set here and inherited, as taskset would). Every job stops --span seconds after its
first batch (20), so every measured span lasts that long whatever the throughput; a tsock
producer serves endlessly and is stopped once its jobs are done. One tsock-mkdataset tree of
photographs (--photos; loudly synthetic without them).

Phase "decode" (one job, no model: the loader alone, as fast as the job takes batches):
  tsock_cpu    tsock-producer --device cuda --decoder cpu (float16 NCHW normalised on the GPU)
  tsock_gpu    the same with --decoder gpu (nvJPEG into the ring)
  tvgpu        the GPU-decode peer: a DataLoader reading bytes, batched
               torchvision.io.decode_jpeg(device="cuda") (nvJPEG), crop/flip/normalise on the GPU
  torchvision  ImageFolder + DataLoader decoding with PIL on the workers
Phase "collocation" (--models, K = --ks jobs): tsock_cpu and tsock_gpu (one producer shared by
the K jobs) and torchvision (K DataLoaders, max(1, cpus // K) workers each); the jobs train
the model in mixed precision on what they receive (benchmarks/collocation/job.py).

Per run: images/s per job (median over the jobs of samples / span) and in aggregate, CPU ms
per image (all the run's processes: producer, jobs, DataLoader workers, reaped, over the images
delivered), GPU utilisation (mean of nvidia-smi's samples during the run; its own CPU is not
counted), and the producer's decoded_gpu / decoded_cpu. Writes --out (JSON) and the same path
with .md (a table).

Every job is bounded: no first batch --margin (30) s after it is let go, or still running
--margin s after its span, and its run fails: the job is asked for its Python stacks (SIGUSR1,
job.py's faulthandler), stopped, and the tail of its stderr goes into the row
(`stderr_tail`) and under the table, as does any failed job's or producer's.

    python3 benchmarks/collocation/gpu_decode.py --photos DIR [--phases decode,collocation]
        [--span 20] [--cpus 4] [--ks 1,4] [--models resnet18,mobilenet_v3_small]
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
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import benchlib  # noqa: E402
import run as colo  # noqa: E402  (Proc, Gate, cpu_of: the collocation benchmark's)

REPO = os.path.dirname(os.path.dirname(HERE))
GPU_OUTPUT = ["--device", "cuda", "--output", "float16", "--layout", "nchw", "--normalize"]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    benchlib.add_tree_args(ap)
    ap.add_argument("--phases", default="decode,collocation")
    ap.add_argument("--span", type=float, default=20.0,
                    help="seconds each collocation job runs after its first batch (20)")
    ap.add_argument("--decode-span", type=float, default=10.0,
                    help="the same for the decode phase (10)")
    ap.add_argument("--deadline", type=float, default=None,
                    help="seconds from now after which no run starts that could not end in "
                         "time (its row says so): for a machine lent for a fixed time")
    ap.add_argument("--margin", type=float, default=30.0,
                    help="seconds a job may take, once let go, to its first batch, and past "
                         "its span to its exit; a job beyond either is stopped, its Python "
                         "stacks and stderr in the report (30)")
    ap.add_argument("--cpus", type=int, default=4)
    ap.add_argument("--ks", default="1,4")
    ap.add_argument("--models", default="resnet18,mobilenet_v3_small")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--bin-dir", default=os.path.join(REPO, "build", "normal", "producer"))
    ap.add_argument("--library", default=os.environ.get(
        "TSOCK_LIBRARY", os.path.join(REPO, "build", "normal", "libtsock", "libtsock.so")))
    ap.add_argument("--out", default=os.path.join(REPO, "build", "gpu_decode.json"))
    args = ap.parse_args()
    args.phases = [p for p in args.phases.split(",") if p]
    args.ks = [int(k) for k in args.ks.split(",") if k]
    args.models = [m for m in args.models.split(",") if m]
    benchlib.find_programs(ap, args)
    return args


class GpuUtil:
    """nvidia-smi sampling the GPU's utilisation every 200 ms while a run lasts; its CPU is
    taken when it is reaped, so that it can be left out of the run's."""

    def __init__(self):
        self.values, self.cpu_s = [], 0.0
        try:
            self.p = subprocess.Popen(["nvidia-smi", "--query-gpu=utilization.gpu",
                                       "--format=csv,noheader,nounits", "-i", "0", "-lms", "200"],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                      text=True)
        except OSError:
            self.p = None
            return
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.p.stdout:
            try:
                self.values.append(float(line.strip()))
            except ValueError:
                pass

    def stop(self):
        if not self.p:
            return None
        self.p.send_signal(signal.SIGTERM)
        _, _, ru = os.wait4(self.p.pid, 0)
        self.p.returncode = 0
        self.cpu_s = colo.cpu_of(ru)
        self.t.join(5)
        return statistics.mean(self.values) if self.values else None


def job_argv(args, loader, name, gate, model, span, endpoint=None, root=None, workers=1):
    argv = [sys.executable, os.path.join(HERE, "job.py"), "--loader", loader, "--name", name,
            "--epochs", "1000", "--max-seconds", str(span), "--batch-size",
            str(args.batch_size), "--delay-ms", "0", "--device", "cuda", "--model", model,
            "--ready-file", gate.ready(name), "--go-file", gate.go,
            "--first-batch-file", first_batch_file(gate, name)]
    if endpoint:
        argv += ["--endpoint", endpoint]
    if root:
        argv += ["--root", root, "--workers", str(workers)]
    return argv


def first_batch_file(gate, name):
    return os.path.join(gate.dir, f"{name}.first")


class RunFailed(RuntimeError):
    """A run that failed: what happened (one line) and the stderr tails that say why."""

    def __init__(self, summary, detail=""):
        super().__init__(summary)
        self.summary, self.detail = summary, detail


def tail(text, lines=40, chars=4000):
    return "\n".join(text.splitlines()[-lines:])[-chars:]


def overdue(jobs, gate, go_t, span, margin, first_seen, now):
    """The jobs past their bound, each with why: no first batch `margin` s after the go, or
    not exited `margin` s after the end of its span (counted from when its first batch was
    seen here: first_seen, name -> time, kept by the caller)."""
    late = []
    for j, name in zip(jobs, gate.names):
        if j.poll():
            continue
        if name not in first_seen and os.path.exists(first_batch_file(gate, name)):
            first_seen[name] = now
        if name not in first_seen:
            if now > go_t + margin:
                late.append((j, f"{name}: no first batch {margin:.0f} s after it was let go"))
        elif now > first_seen[name] + span + margin:
            late.append((j, f"{name}: still running {margin:.0f} s after its {span:.0f} s span"))
    return late


def stuck_report(late):
    """Asks each late job for its Python stacks (job.py's SIGUSR1), then its stderr's tail."""
    for j, _ in late:
        try:
            j.popen.send_signal(signal.SIGUSR1)
        except ProcessLookupError:
            pass
    time.sleep(2)
    return "\n".join(f"--- {why}; its stderr's tail (Python stacks last):\n{tail(j.stderr())}"
                     for j, why in late)


def producer_argv(args, root, endpoint, decoder, k, stats):
    return [args.producer, "--dataset", "imagenet", "--root", root, "--workers",
            str(args.cpus), "--batch-size", str(args.batch_size), "--slots", str(args.slots),
            "--epochs", "0", "--endpoint", endpoint, "--wait-consumers", str(k), "--stats-json",
            stats, "--stats-interval", "1", "--quiet", "--decoder", decoder] + GPU_OUTPUT


def last_pipeline(stats):
    try:
        with open(stats) as f:
            recs = [json.loads(l) for l in f if l.strip()]
    except (OSError, ValueError):
        return {}
    for r in reversed(recs):
        if "pipeline" in r:
            return r["pipeline"]
        if "decoded_gpu" in r:  # an interval record (a producer stopped before its final one)
            return r
    return {}


def run_one(args, config, model, k, span, root, workdir, env, tag):
    gate = colo.Gate(workdir, tag)
    jobs, producer, stats = [], None, os.path.join(workdir, f"{tag}.stats")
    endpoint = f"ipc://{workdir}/{tag}.sock"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    util = None
    try:
        for i in range(k):
            if config.startswith("tsock"):
                argv = job_argv(args, "tsock", f"j{i}", gate, model, span, endpoint=endpoint)
            else:
                argv = job_argv(args, config, f"j{i}", gate, model, span, root=root,
                                workers=max(1, args.cpus // k))
            jobs.append(colo.Proc("job", argv, workdir, f"{tag}-j{i}", env))
        gate.wait_ready(jobs, timeout=90)
        util = GpuUtil()
        if config.startswith("tsock"):
            producer = colo.Proc("producer", producer_argv(
                args, root, endpoint, "gpu" if config == "tsock_gpu" else "cpu", k, stats),
                workdir, f"{tag}-producer", env)
        gate.open()
        go_t, first_seen = time.monotonic(), {}
        while not all(j.poll() for j in jobs):
            if producer and producer.poll():
                raise RunFailed(f"{tag}: the producer exited ({producer.status})",
                                "--- the producer's stderr:\n" + tail(producer.stderr()))
            late = overdue(jobs, gate, go_t, span, args.margin, first_seen, time.monotonic())
            if late:
                raise RunFailed(f"{tag}: " + "; ".join(why for _, why in late),
                                stuck_report(late))
            time.sleep(0.05)
        if producer:
            producer.popen.send_signal(signal.SIGTERM)
            end = time.monotonic() + 30
            while not producer.poll() and time.monotonic() < end:
                time.sleep(0.05)
    finally:
        gpu_util = util.stop() if util else None
        for p in jobs + ([producer] if producer else []):
            p.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = colo.cpu_of(after) - colo.cpu_of(before) - (util.cpu_s if util else 0.0)
    bad = [(j, n) for j, n in zip(jobs, gate.names) if j.status != 0]
    if bad:
        raise RunFailed(f"{tag}: " + "; ".join(f"{n} exited with {j.status}" for j, n in bad),
                        "\n".join(f"--- {n}'s stderr:\n{tail(j.stderr())}" for j, n in bad))
    res = [benchlib.last_json(j.stdout()) for j in jobs]
    rates = [r["samples"] / (r["last_batch_t"] - r["first_batch_t"]) for r in res]
    samples = sum(r["samples"] for r in res)
    spans = [r["last_batch_t"] - r["first_batch_t"] for r in res]
    pl = last_pipeline(stats) if producer else {}
    return {"config": config, "model": model, "k": k, "samples": samples,
            "images_per_s_per_job": statistics.median(rates), "images_per_s": sum(rates),
            "min_span_s": min(spans), "cpu_s": cpu, "cpu_ms_per_image": 1e3 * cpu / samples,
            "gpu_util_percent": gpu_util, "data_wait": statistics.mean(
                r["wait_after_first_s"] / s for r, s in zip(res, spans) if s > 0),
            "decoded_gpu": pl.get("decoded_gpu"), "decoded_cpu": pl.get("decoded_cpu")}


def markdown(out):
    lines = [f"# Issue 20: GPU decoding and collocation, {out['gpu']}, {out['cpus']} cores",
             "", f"commit {out['commit']}, {out['date_utc']}; each job runs {out['span_s']} s "
             f"(decode phase: {out['decode_span_s']} s) after its first batch; photographs: "
             f"{out.get('dataset', {}).get('source', out.get('dataset'))}", "",
             "| Phase | Model | Config | K | images/s per job | aggregate | CPU ms/image | "
             "GPU util % | data wait | decoded gpu/cpu |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in out["runs"]:
        if "error" in r or "skipped" in r:
            why = f"FAILED: {r['error'][:80]}" if "error" in r else f"not run: {r['skipped']}"
            lines.append(f"| {r['phase']} | {r['model']} | {r['config']} | {r['k']} | "
                         f"{why} | | | | | |")
            continue
        util = "" if r["gpu_util_percent"] is None else f"{r['gpu_util_percent']:.0f}"
        dec = "" if r["decoded_gpu"] is None else f"{r['decoded_gpu']}/{r['decoded_cpu']}"
        lines.append(f"| {r['phase']} | {r['model']} | {r['config']} | {r['k']} | "
                     f"{r['images_per_s_per_job']:.0f} | {r['images_per_s']:.0f} | "
                     f"{r['cpu_ms_per_image']:.2f} | {util} | {r['data_wait']:.0%} | {dec} |")
    failures = [r for r in out["runs"] if "error" in r]
    for r in failures:
        lines += ["", f"## FAILED: {r['phase']} {r['model']} {r['config']} K={r['k']}", "",
                  r["error"], ""]
        if r.get("stderr_tail"):
            lines += ["```", r["stderr_tail"], "```"]
    return "\n".join(lines) + "\n"


def main():
    args = parse_args()
    cores = sorted(os.sched_getaffinity(0))[:args.cpus]
    os.sched_setaffinity(0, cores)  # inherited by every child: the fixed CPU budget
    env = colo.child_env(args)
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip().splitlines()
    out = {"benchmark": "gpu_decode", "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
           "commit": benchlib.git_commit(), "machine": benchlib.machine(),
           "gpu": gpu[0] if gpu else "?", "cpus": cores, "span_s": args.span,
           "decode_span_s": args.decode_span,
           "batch_size": args.batch_size,
           "command": " ".join([os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:]), "runs": []}
    workdir = tempfile.mkdtemp(prefix="tsock-gpudec-", dir="/tmp")
    os.chmod(workdir, 0o700)
    plan = []
    if "decode" in args.phases:
        plan += [("decode", c, "none", 1) for c in ("tsock_cpu", "tsock_gpu", "tvgpu",
                                                     "torchvision")]
    if "collocation" in args.phases:
        # The most telling runs first (most jobs, the model where loading dominates), so that
        # a deadline cuts the least telling.
        plan += [("collocation", c, m, k) for k in sorted(args.ks, reverse=True)
                 for m in reversed(args.models) for c in ("tsock_gpu", "tsock_cpu",
                                                          "torchvision")]
    t0 = time.monotonic()
    end = t0 + args.deadline if args.deadline else None
    failed = 0
    try:
        root, out["dataset"] = ((args.root, {"root": args.root}) if args.root
                                else colo.make_tree(args, workdir))
        for n, (phase, config, model, k) in enumerate(plan):
            tag = f"{n}-{config}-{model}-{k}"
            span = args.decode_span if phase == "decode" else args.span
            if end and time.monotonic() + span + 15 > end:
                out["runs"].append({"phase": phase, "config": config, "model": model, "k": k,
                                    "skipped": "the deadline (--deadline) came first"})
                continue
            try:
                r = run_one(args, config, model, k, span, root, workdir, env, tag)
            except Exception as e:  # one failed run is reported; the others still run
                failed += 1
                r = {"config": config, "model": model, "k": k, "error": str(e)[:500],
                     "stderr_tail": getattr(e, "detail", "")}
                print(f"{tag}: FAILED: {e}\n{r['stderr_tail']}", file=sys.stderr, flush=True)
            r["phase"] = phase
            out["runs"].append(r)
            write(args, out)
            if "error" not in r:
                print(f"[{time.monotonic() - t0:5.0f} s] {phase} {model} {config} K={k}: "
                      f"{r['images_per_s_per_job']:.0f} img/s/job, {r['cpu_ms_per_image']:.2f} "
                      f"CPU ms/img, GPU {r['gpu_util_percent']}%", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    out["duration_s"] = time.monotonic() - t0
    print(write(args, out))
    return 1 if failed else 0


def write(args, out):
    """The JSON and its table, rewritten after every run: a run cut short keeps the rest."""
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    md = markdown(out)
    with open(os.path.splitext(args.out)[0] + ".md", "w") as f:
        f.write(md)
    return md


if __name__ == "__main__":
    sys.exit(main())
