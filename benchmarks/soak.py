#!/usr/bin/env python3
"""Soak run: one tsock-producer on a tsock-mkdataset tree for a given time (default 10 minutes)
while consumers come and go, and checks that nothing is lost and nothing grows.

    python3 benchmarks/soak.py [--minutes 10] [--bin-dir build/producer] [--out FILE.json]

During the run:
- "random" lanes start tsock-consume with a random batch size, step time and epoch count,
  wait a random while, and start the next; about a third of them are killed with kill -9 in
  mid-run and restarted at once;
- "pauser" reads epochs with a 3 s pause between them (the library pauses it after the
  default 100 ms grace);
- "reconnector" runs all the time with --reconnect-ms: half-way through, the producer is
  killed with kill -9 and a new one started on the same endpoint; it must go on there;
- "stat" runs tsock-stat --json every few seconds.

It reports every consumer's per-epoch exactness (each complete epoch holds every sample id
exactly once, no byte/label/index error), the producer's RSS, open file descriptors and
/dev/shm objects over time, and the producer's CPU per image. It exits 1 when anything was
lost or inexact, when the producer's RSS grew by more than --rss-growth-mib between the end of
the warm-up and the end of its run, when its descriptors or mapped /dev/shm objects with no
consumer connected differ from the first producer's, when a dead producer's ring survived,
or when tsock-stat failed against a live producer. Standard library only.
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

ERROR_KEYS = ("content_errors", "label_errors", "index_errors", "layout_errors", "duplicates",
              "missing", "out_of_order", "batch_size_errors", "epoch_size_errors")


class Soak:
    def __init__(self, args, workdir):
        self.args = args
        self.dir = workdir
        self.endpoint = "ipc://" + os.path.join(workdir, "producer.sock")
        self.lock = threading.Lock()
        self.sample_lock = threading.Lock()  # no sample of a producer being killed
        self.stop = threading.Event()
        self.restarting = threading.Event()
        self.producers = []  # dicts: pid, proc, stats path, samples, started
        self.consumers = []  # one record per consumer run
        self.stat_samples = []
        self.problems = []
        self.rng = random.Random(args.seed)
        self.t0 = time.monotonic()
        self.restart_s = None

    def now(self):
        return round(time.monotonic() - self.t0, 2)

    def problem(self, text):
        with self.lock:
            self.problems.append(f"{self.now():.1f} s: {text}")
        print(f"soak: PROBLEM: {text}", file=sys.stderr, flush=True)

    # ---- producer ----------------------------------------------------------------------------

    def start_producer(self):
        n = len(self.producers)
        stats = os.path.join(self.dir, f"producer{n}.jsonl")
        argv = [self.args.producer, "--dataset", "folder", "--root", self.tree, "--endpoint",
                self.endpoint, "--epochs", "0", "--image-size", str(self.args.image_size),
                "--batch-size", str(self.args.batch), "--slots", "8", "--workers", "1",
                "--heartbeat-ms", "100", "--heartbeat-timeout-ms", "1000", "--seed", str(n),
                "--stats-json", stats, "--stats-interval", "2", "--quiet"]
        err = open(os.path.join(self.dir, f"producer{n}.err"), "w")
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        rec = {"index": n, "pid": p.pid, "proc": p, "stats": stats, "started_s": self.now(),
               "samples": [], "shm_names": set()}
        deadline = time.monotonic() + 60
        while not os.path.exists(self.endpoint[len("ipc://"):]):
            if p.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"producer {n} did not start (exit {p.poll()})")
            time.sleep(0.05)
        with self.lock:
            self.producers.append(rec)
        return rec

    def sample_producer(self, rec, idle=False):
        """RSS, open descriptors and mapped /dev/shm objects of a live producer."""
        pid = rec["pid"]
        try:
            with open(f"/proc/{pid}/status") as f:
                rss = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))
            fds = len(os.listdir(f"/proc/{pid}/fd"))
            shm = set()
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    parts = line.split(None, 5)
                    if len(parts) == 6 and parts[5].startswith("/dev/shm/"):
                        shm.add(parts[5].strip())
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            cpu_s = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, StopIteration, ValueError):
            return None
        own = [n for n in os.listdir("/dev/shm") if n.startswith(f"tsock-{os.getuid()}-{pid}-")]
        s = {"t_s": self.now(), "rss_bytes": rss, "fds": fds, "shm_mapped": len(shm),
             "shm_objects": len(own), "cpu_s": cpu_s, "idle": idle}
        rec["shm_names"] |= {os.path.basename(x) for x in shm}
        rec["samples"].append(s)
        return s

    def sampler(self):
        while not self.stop.wait(self.args.sample_s):
            with self.lock:
                rec = self.producers[-1] if self.producers else None
            with self.sample_lock:
                if rec and rec["proc"].poll() is None and not rec.get("dying"):
                    self.sample_producer(rec)

    # ---- consumers ---------------------------------------------------------------------------

    def consume(self, lane, extra, kill_after=None, sigint_at_stop=False):
        """Runs one tsock-consume; returns its record (result JSON, how it ended)."""
        argv = [self.args.consume, "--endpoint", self.endpoint, "--content", "images", "--json",
                "--quiet", "--no-digest", "--name", lane, "--heartbeat-ms", "100",
                "--heartbeat-timeout-ms", "1000", "--connect-timeout-ms", "30000",
                "--timeout-ms", "30000"] + extra
        rec = {"lane": lane, "argv": extra, "start_s": self.now()}
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + (kill_after if kill_after is not None else 1e9)
        while p.poll() is None:
            if self.stop.is_set() and sigint_at_stop:
                p.send_signal(signal.SIGINT)
                rec["sigint"] = True
                break
            if time.monotonic() >= deadline:
                p.send_signal(signal.SIGKILL)
                rec["killed_s"] = self.now()
                break
            time.sleep(0.05)
        try:
            out, err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            self.problem(f"{lane} did not end within 120 s of being asked")
        rec["end_s"] = self.now()
        rec["exit"] = p.returncode
        lines = [l for l in out.splitlines() if l.startswith("{")]
        rec["result"] = json.loads(lines[-1]) if lines else None
        rec["stderr"] = err[-400:]
        self.judge(rec)
        with self.lock:
            self.consumers.append(rec)
        return rec

    def judge(self, rec):
        """Per-epoch exactness of one consumer run; how it ended decides what is expected."""
        res, lane = rec["result"], rec["lane"]
        if "killed_s" in rec:
            rec["verdict"] = "killed (kill -9)"
            return
        if res is None:
            self.problem(f"{lane} printed no JSON (exit {rec['exit']}): {rec['stderr']}")
            rec["verdict"] = "no result"
            return
        bad = {k: res[k] for k in ERROR_KEYS if res.get(k)}
        size = res["dataset_size"]
        cut = list(res["interrupted_epoch_samples"])
        complete = list(res["per_epoch_samples"])
        for n in cut:
            if n and n in complete:
                complete.remove(n)
        # A run stopped by SIGINT may end inside an epoch: that last, open epoch is not complete.
        if rec["exit"] == 130 and len(complete) > res["epochs"]:
            complete = complete[:res["epochs"]]
        rec["epochs"] = res["epochs"]
        rec["exact_epochs"] = sum(1 for n in complete if n == size)
        rec["inexact_epochs"] = [n for n in complete if n != size]
        rec["interrupted"] = res["interrupted_epochs"]
        ended_by_restart = (rec["exit"] == 1 and res["error_code"] in (-10003, -10004)
                            and self.restart_s is not None
                            and -1 <= rec["end_s"] - self.restart_s <= 20)
        if bad or rec["inexact_epochs"]:
            self.problem(f"{lane}: errors {bad}, inexact epochs {rec['inexact_epochs']}")
            rec["verdict"] = "INEXACT"
        elif rec["exit"] == 0 or (rec["exit"] == 130 and rec.get("sigint")):
            rec["verdict"] = "exact"
        elif ended_by_restart:
            rec["verdict"] = "ended by the producer's kill (no reconnect asked), exact until then"
        else:
            self.problem(f"{lane}: exit {rec['exit']} ({res.get('error')})")
            rec["verdict"] = f"failed: {res.get('error')}"

    def random_lane(self, lane):
        rng = random.Random(f"{self.args.seed}-{lane}")
        while not self.stop.is_set():
            extra = ["--epochs", str(rng.randint(1, 4)),
                     "--batch-size", str(rng.choice([0, 7, 32, 50, 100])),
                     "--delay-ms", str(rng.randint(20, 60))]
            kill = rng.uniform(0.5, 6.0) if rng.random() < self.args.kill_fraction else None
            rec = self.consume(lane, extra, kill_after=kill)
            if "killed_s" in rec:
                continue  # restarted at once
            self.stop.wait(rng.uniform(0.0, 3.0))

    def pauser(self):
        while not self.stop.is_set():
            self.consume("pauser", ["--epochs", "3", "--delay-ms", "30",
                                    "--pause-between-epochs-ms", "3000"])

    def reconnector(self):
        rec = self.consume("reconnector", ["--epochs", "0", "--delay-ms", "25",
                                           "--reconnect-ms", "60000"], sigint_at_stop=True)
        return rec

    def stat_sampler(self):
        while not self.stop.wait(self.args.stat_s):
            t = self.now()
            r = subprocess.run([self.args.stat, self.endpoint, "--json", "--timeout-ms", "5000"],
                               capture_output=True, text=True, timeout=60)
            ok = r.returncode == 0
            s = {"t_s": t, "ok": ok}
            if ok:
                snap = json.loads(r.stdout.strip().splitlines()[-1])
                s["consumers"] = len(snap["consumers"])
                s["producer_pid"] = snap["producer"]["pid"]
                s["slots_held"] = snap["producer"]["slots_held"]
            elif not self.restarting.is_set():
                self.problem(f"tsock-stat failed against the live producer: {r.stderr.strip()}")
            with self.lock:
                self.stat_samples.append(s)

    # ---- the run -----------------------------------------------------------------------------

    def idle_baseline(self, rec):
        """Descriptors and mapped objects of a producer with no consumer connected."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            r = subprocess.run([self.args.stat, self.endpoint, "--json"], capture_output=True,
                               text=True, timeout=30)
            if r.returncode == 0:
                snap = json.loads(r.stdout.strip().splitlines()[-1])
                if not snap["consumers"] and snap["producer"]["slots_held"] == 0:
                    return self.sample_producer(rec, idle=True)
            time.sleep(0.5)
        self.problem("the consumers never all left the producer")
        return None

    def run(self):
        a = self.args
        self.tree, tree_info, _ = benchlib.make_tree(a, self.dir)
        self.tree_info = tree_info
        p1 = self.start_producer()
        self.idle = [self.idle_baseline(p1)]
        threads = [threading.Thread(target=self.sampler, daemon=True),
                   threading.Thread(target=self.stat_sampler, daemon=True),
                   threading.Thread(target=self.pauser, daemon=True),
                   threading.Thread(target=self.reconnector, daemon=True)]
        threads += [threading.Thread(target=self.random_lane, args=(f"random{i}",), daemon=True)
                    for i in range(a.random_lanes)]
        for t in threads:
            t.start()
        duration = a.minutes * 60
        self.stop.wait(duration / 2)
        # The producer restart: kill -9, then a new one on the same endpoint.
        self.restarting.set()
        # kill -9 leaves no final record: its images from tsock-stat, its CPU from /proc.
        r = subprocess.run([a.stat, self.endpoint, "--json"], capture_output=True, text=True,
                           timeout=30)
        if r.returncode == 0:
            p1["images_at_kill"] = json.loads(r.stdout.strip().splitlines()[-1])[
                "producer"]["samples"]
        with self.sample_lock:
            self.sample_producer(p1)
            self.restart_s = self.now()
            p1["dying"] = True
            os.kill(p1["pid"], signal.SIGKILL)
        p1["proc"].wait()
        p1["killed_s"] = self.now()
        p2 = self.start_producer()
        # The new producer removes a dead one's ring once it serves: allow it that moment.
        deadline = time.monotonic() + 10
        while True:
            stale = [n for n in p1["shm_names"] if os.path.exists(os.path.join("/dev/shm", n))]
            if not stale or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        p1["stale_after_restart"] = stale
        if stale:
            self.problem(f"the killed producer's ring survived the new one's start: {stale}")
        time.sleep(3)
        self.restarting.clear()
        self.stop.wait(duration / 2)
        self.stop.set()
        for t in threads[2:]:
            t.join(timeout=180)
            if t.is_alive():
                self.problem(f"a consumer thread did not end: {t.name}")
        self.idle.append(self.idle_baseline(p2))
        self.sample_producer(p2)
        os.kill(p2["pid"], signal.SIGTERM)
        rc = p2["proc"].wait(timeout=30)
        if rc != 0:
            self.problem(f"the last producer exited {rc} after SIGTERM")
        left = [n for n in p2["shm_names"] if os.path.exists(os.path.join("/dev/shm", n))]
        if left:
            self.problem(f"the last producer left {left} behind")
        threads[0].join(timeout=a.sample_s + 5)
        threads[1].join(timeout=a.stat_s + 70)

    def producer_figures(self, rec):
        records = []
        if os.path.exists(rec["stats"]):
            with open(rec["stats"]) as f:
                for line in f:
                    try:
                        records.append(json.loads(line))
                    except ValueError:
                        pass  # a line cut by kill -9
        last = records[-1] if records else {}
        samples = rec["samples"]
        warm = [s for s in samples if s["t_s"] >= rec["started_s"] + self.args.warmup_s]
        out = {"pid": rec["pid"], "started_s": rec["started_s"], "killed_s": rec.get("killed_s"),
               "images": last.get("samples"), "batches": last.get("batches"),
               "cpu_s": last.get("cpu_s"), "read_mode": (last.get("pipeline") or {}).get(
                   "read_mode"), "consumers_joined": last.get("consumers_joined"),
               "consumers_lost": last.get("consumers_lost"),
               "bad_messages": last.get("bad_messages"), "record_type": last.get("type"),
               "stale_after_restart": rec.get("stale_after_restart"), "over_time": samples}
        if rec.get("images_at_kill") and samples:
            out["images"] = rec["images_at_kill"]
            out["cpu_s"] = samples[-1]["cpu_s"]
            out["cpu_source"] = "tsock-stat and /proc/PID/stat just before the kill"
        if out["images"] and out["cpu_s"]:
            out["cpu_ms_per_image"] = round(1000 * out["cpu_s"] / out["images"], 4)
        if len(warm) >= 2:
            out["rss_after_warmup_bytes"] = warm[0]["rss_bytes"]
            out["rss_end_bytes"] = warm[-1]["rss_bytes"]
            out["rss_max_bytes"] = max(s["rss_bytes"] for s in warm)
            out["rss_growth_bytes"] = warm[-1]["rss_bytes"] - warm[0]["rss_bytes"]
            out["fds_range"] = [min(s["fds"] for s in samples), max(s["fds"] for s in samples)]
            out["shm_mapped_range"] = [min(s["shm_mapped"] for s in samples),
                                       max(s["shm_mapped"] for s in samples)]
            if out["rss_growth_bytes"] > self.args.rss_growth_mib * 2**20:
                self.problem(f"producer {rec['index']} RSS grew by "
                             f"{out['rss_growth_bytes'] / 2**20:.2f} MiB after the warm-up")
        else:
            self.problem(f"producer {rec['index']}: too few samples after the warm-up")
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--bin-dir", default=os.path.join(benchlib.REPO, "build", "producer"))
    ap.add_argument("--out", help="write the JSON here too")
    ap.add_argument("--random-lanes", type=int, default=3)
    ap.add_argument("--kill-fraction", type=float, default=0.35)
    ap.add_argument("--batch", type=int, default=32, help="producer batch size (32)")
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--sample-s", type=float, default=5.0)
    ap.add_argument("--stat-s", type=float, default=7.0)
    ap.add_argument("--warmup-s", type=float, default=30.0)
    ap.add_argument("--rss-growth-mib", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=1)
    benchlib.add_tree_args(ap, classes=8)
    ap.set_defaults(images=600)
    args = ap.parse_args()
    args.stat = os.path.join(args.bin_dir, "tsock-stat")
    benchlib.find_programs(ap, args, args.stat)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    commit = benchlib.git_commit()  # at the start: the checkout may move on during the run
    machine = benchlib.machine()  # with the load average at the start
    with tempfile.TemporaryDirectory(prefix="tsock-soak-") as workdir:
        soak = Soak(args, workdir)
        try:
            soak.run()
        finally:
            soak.stop.set()
            for rec in soak.producers:
                if rec["proc"].poll() is None:
                    rec["proc"].kill()
        producers = [soak.producer_figures(r) for r in soak.producers]
    idle = [s for s in soak.idle if s]
    if len(idle) == 2:
        for key in ("fds", "shm_mapped", "shm_objects"):
            if idle[0][key] != idle[1][key]:
                soak.problem(f"with no consumer connected, the producer's {key} went from "
                             f"{idle[0][key]} (first producer, start) to {idle[1][key]} "
                             f"(second producer, end)")
    cons = soak.consumers
    by_verdict = {}
    for c in cons:
        by_verdict[c["verdict"]] = by_verdict.get(c["verdict"], 0) + 1
    stat_ok = sum(1 for s in soak.stat_samples if s["ok"])
    reconn = [c for c in cons if c["lane"] == "reconnector"]
    if not reconn or reconn[0].get("interrupted", 0) > 1 or not reconn[0].get("exact_epochs"):
        soak.problem(f"the reconnector did not go on exactly across the restart: {reconn}")
    elif not any(p["started_s"] > reconn[0]["start_s"] for p in soak.producers[1:]):
        soak.problem("the reconnector did not live across the restart")
    summary = {
        "benchmark": "soak", "commit": commit, "date": started,
        "machine": machine, "load_avg_at_end": os.getloadavg(),
        "minutes": args.minutes, "tree": soak.tree_info,
        "config": {k: getattr(args, k) for k in ("random_lanes", "kill_fraction", "batch",
                                                 "image_size", "sample_s", "stat_s",
                                                 "warmup_s", "rss_growth_mib", "seed",
                                                 "images", "classes")},
        "consumer_runs": len(cons), "verdicts": by_verdict,
        "killed_and_restarted": sum(1 for c in cons if "killed_s" in c),
        "exact_epochs": sum(c.get("exact_epochs", 0) for c in cons),
        "inexact_epochs": sum(len(c.get("inexact_epochs", [])) for c in cons),
        "interrupted_epochs": sum(c.get("interrupted", 0) for c in cons),
        "pauser_runs": sum(1 for c in cons if c["lane"] == "pauser"),
        "reconnector": {k: reconn[0].get(k) for k in ("epochs", "exact_epochs", "interrupted",
                                                       "verdict", "start_s", "end_s")}
        if reconn else None,
        "stat_samples": len(soak.stat_samples), "stat_ok": stat_ok,
        "idle_baselines": idle, "producers": producers,
        "consumers": [{k: v for k, v in c.items() if k not in ("result", "stderr")}
                      for c in cons],
        "problems": soak.problems, "ok": not soak.problems,
    }
    text = json.dumps(summary)
    if args.out:
        with open(args.out, "w") as f:
            f.write(json.dumps(summary, indent=1) + "\n")
    print(text)
    benchlib.warn_fallback(args)
    for p in producers:
        print(f"soak: producer {p['pid']}: {p.get('images')} images, "
              f"{p.get('cpu_ms_per_image')} ms CPU per image, RSS "
              f"{(p.get('rss_after_warmup_bytes') or 0) / 2**20:.2f} -> "
              f"{(p.get('rss_end_bytes') or 0) / 2**20:.2f} MiB, fds {p.get('fds_range')}, "
              f"shm mapped {p.get('shm_mapped_range')}", file=sys.stderr)
    print(f"soak: {len(cons)} consumer runs {by_verdict}; {summary['exact_epochs']} exact "
          f"epochs, {summary['inexact_epochs']} inexact; tsock-stat {stat_ok}/"
          f"{len(soak.stat_samples)}; problems: {len(soak.problems)}", file=sys.stderr)
    for p in soak.problems:
        print(f"soak: PROBLEM: {p}", file=sys.stderr)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
