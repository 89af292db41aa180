#!/usr/bin/env python3
"""Producer memory: RSS with a 1.28-million-entry index and the ring, and no growth over epochs.

Two parts, in one invocation:

  big    An ImageNet-sized ImageFolder tree (1000 classes x 1280 files = 1.28 million entries)
         made of hard links to one small valid JPEG (to a few copies of it: a file system caps the
         links to one inode), in a temporary folder (making 1.28 million
         real files would take hours; the index, the header check and the memory figures do
         not depend on the files being different). tsock-producer --dataset imagenet serves it
         to one tsock-consume twice with --index-cache: first without a cache file (index
         built by scanning and header-checking every file, cache written), then with it.
         Each run is stopped with SIGTERM after --batches batches. Reported: index build time
         and scan rate, index bytes per sample (pipeline.index_bytes / dataset samples), the
         producer's RSS from its interval records (first, last, max) and its split into
         anonymous memory and shared memory (the ring) read from /proc/PID/status mid-run.
  epochs A tree of real images (tsock-mkdataset, cropped from the photographs under
         /usr/share/backgrounds, installed when missing: benchlib.setup_photos) served for
         --epochs epochs: RSS from every interval record, to show it is flat after warm-up
         (first, last, max, and the growth between the end of the first epoch and the end of
         the run).

"Cold" here means without an index cache; the kernel's dentry and inode caches are warm (the
tree was just made), as they are on a machine that read the dataset recently. The ring is
--slots x --batch-size x 224 x 224 x 3 bytes of shared memory, resident in the producer once
every slot has been written.

    python3 benchmarks/producer_memory.py [--entries 1280000] [--batches 600] [--epochs 100]

Writes docs/benchmarks/producer_memory.json (--out) and prints a summary. The temporary trees
are removed at the end.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from benchlib import (add_photos_args, find_programs, git_commit, setup_photos,  # beside
                      warn_fallback)  # this script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(REPO, "build", "normal")
IMAGE_BYTES = 224 * 224 * 3
LINKS_PER_COPY = 50000




def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=1_280_000, help="index entries (big tree)")
    ap.add_argument("--classes", type=int, default=1000, help="classes of the big tree")
    ap.add_argument("--batches", type=int, default=600,
                    help="batches served per big-tree run before SIGTERM")
    ap.add_argument("--images", type=int, default=800, help="images of the epochs tree")
    ap.add_argument("--epochs", type=int, default=100, help="epochs served over the small tree")
    add_photos_args(ap)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--stats-interval", type=float, default=0.5)
    ap.add_argument("--tmp", default=None, help="where to make the trees (default: $TMPDIR)")
    ap.add_argument("--bin-dir", default=os.path.join(BUILD, "producer"))
    ap.add_argument("--out", default=os.path.join(REPO, "docs", "benchmarks",
                                                   "producer_memory.json"))
    args = ap.parse_args()
    find_programs(ap, args)
    return args


def mkdataset(args, out, images, classes):
    setup_photos(args)
    cmd = [args.mkdataset, out, "--images", str(images), "--classes", str(classes), "--json"]
    if args.photos:
        cmd += ["--photos", args.photos]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"tsock-mkdataset failed ({r.returncode}): {r.stderr}")
    summary = json.loads([l for l in r.stdout.splitlines() if l.startswith("{")][-1])
    summary["photos_fallback"] = args.photos_fallback
    return summary


def make_link_tree(args, workdir):
    """1000 class folders of hard links to one JPEG, named as ImageNet's train files."""
    seed_dir = os.path.join(workdir, "one")
    summary = mkdataset(args, seed_dir, 1, 1)
    src = None
    for dirpath, _, files in os.walk(seed_dir):
        for f in files:
            src = os.path.join(dirpath, f)
    root = os.path.join(workdir, "big")
    os.mkdir(root)
    t0 = time.monotonic()
    per, extra = divmod(args.entries, args.classes)
    # File systems cap the links to one inode (ext4: 65000), so a fresh copy of the file (same
    # bytes) takes over every LINKS_PER_COPY links.
    copies, links, target = 1, 0, src
    for c in range(args.classes):
        name = f"n{1440764 + 7 * c:08d}"
        d = os.path.join(root, name)
        os.mkdir(d)
        for i in range(per + (1 if c < extra else 0)):
            if links == LINKS_PER_COPY:
                target = os.path.join(workdir, "one", f"copy{copies}.JPEG")
                shutil.copyfile(src, target)
                copies, links = copies + 1, 0
            os.link(target, os.path.join(d, f"{name}_{i}.JPEG"))
            links += 1
    return root, {"seconds_to_link": time.monotonic() - t0, "inodes": copies,
                  "file_bytes": os.path.getsize(src),
                  "file_width": summary.get("mean_width"),
                  "file_height": summary.get("mean_height")}


def proc_status(pid):
    """RssAnon, RssFile, RssShmem, VmRSS of a live process, in bytes."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, val = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM"):
                    out[key] = int(val.split()[0]) * 1024
    except OSError:
        pass
    return out


def read_records(path):
    try:
        with open(path) as f:
            return [json.loads(l) for l in f if l.strip().endswith("}")]
    except (OSError, ValueError):
        return []


def serve(args, root, workdir, tag, epochs, stop_after_batches=None, cache=None,
          timeout_s=1800):
    """Runs one producer and one consumer; returns the producer's records and /proc samples."""
    endpoint = f"ipc://{workdir}/{tag}.sock"
    stats = os.path.join(workdir, f"{tag}.jsonl")
    pcmd = [args.producer, "--dataset", "imagenet", "--root", root, "--workers",
            str(args.workers), "--batch-size", str(args.batch_size), "--slots", str(args.slots),
            "--epochs", str(epochs), "--endpoint", endpoint, "--wait-consumers", "1",
            "--stats-json", stats, "--stats-interval", str(args.stats_interval), "--quiet"]
    if cache:
        pcmd += ["--index-cache", cache]
    ccmd = [args.consume, "--endpoint", endpoint, "--content", "images", "--epochs",
            str(epochs), "--json", "--quiet"]
    t0 = time.monotonic()
    prod = subprocess.Popen(pcmd, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    cons = subprocess.Popen(ccmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    samples = []  # /proc/PID/status while serving
    stopped = False
    try:
        while prod.poll() is None:
            if time.monotonic() - t0 > timeout_s:
                raise RuntimeError(f"{tag}: the producer did not finish in {timeout_s} s")
            time.sleep(0.5)
            recs = [r for r in read_records(stats) if r.get("type") == "interval"]
            if recs and recs[-1]["batches"] > 0:
                st = proc_status(prod.pid)
                if st:
                    st["batches"] = recs[-1]["batches"]
                    samples.append(st)
            if stop_after_batches and recs and recs[-1]["batches"] >= stop_after_batches \
                    and not stopped:
                prod.send_signal(signal.SIGTERM)
                stopped = True
        _, perr = prod.communicate(timeout=60)
        cout, cerr = cons.communicate(timeout=60)
    finally:
        for p in (prod, cons):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
    if prod.returncode != 0:
        raise RuntimeError(f"{tag}: tsock-producer exit {prod.returncode}: {perr}")
    records = read_records(stats)
    if not records or records[-1].get("type") != "final":
        raise RuntimeError(f"{tag}: no final record in the producer's stats")
    cres = [l for l in cout.splitlines() if l.startswith("{")]
    return {"records": records, "proc": samples, "command": " ".join(pcmd),
            "consumer_exit": cons.returncode,
            "consumer": json.loads(cres[-1]) if cres else None}


def rss_summary(records, after_batches=0):
    # The interval records and the final one (taken after the ring was torn down, so its RSS
    # is left out: only records written while serving count).
    iv = [r for r in records if r.get("type") == "interval" and r["batches"] >= after_batches
          and r["batches"] > 0]
    if not iv:
        return None
    rss = [r["rss_bytes"] for r in iv]
    return {"intervals": len(iv), "first_bytes": rss[0], "last_bytes": rss[-1],
            "max_bytes": max(rss), "min_bytes": min(rss), "last_minus_first_bytes":
            rss[-1] - rss[0]}


def big_run_summary(run, slots):
    final = run["records"][-1]
    pl = final["pipeline"]
    n = final["dataset_samples"]
    mid = run["proc"][len(run["proc"]) // 2] if run["proc"] else {}
    return {
        "dataset_samples": n,
        "index_from_cache": pl["index_from_cache"],
        "index_s": pl["index_s"],
        "scan_rate_files_per_s": n / pl["index_s"] if pl["index_s"] > 0 else None,
        "index_bytes": pl["index_bytes"],
        "index_bytes_per_sample": pl["index_bytes"] / n,
        "batches": final["batches"],
        "samples": final["samples"],
        "wall_s": final["wall_s"],
        "cpu_s": final["cpu_s"],
        "rss": rss_summary(run["records"]),
        # After warm-up: every slot written twice.
        "rss_after_warmup": rss_summary(run["records"], 2 * slots),
        "rss_final_bytes": final["rss_bytes"],
        "max_rss_bytes": final["max_rss_bytes"],
        "proc_status_mid_run": mid,
        "command": run["command"],
        "consumer_exit": run["consumer_exit"],
    }


def mib(b):
    return b / 2**20


def main():
    args = parse_args()
    ring = args.slots * args.batch_size * (IMAGE_BYTES + 16)
    out = {"benchmark": "producer_memory", "date_utc": time.strftime("%Y-%m-%d %H:%M",
                                                                    time.gmtime()),
           "cpus": os.cpu_count(),
           "commit": git_commit(),
           "config": {"entries": args.entries, "classes": args.classes,
                      "batches_per_big_run": args.batches, "epochs": args.epochs,
                      "epochs_tree_images": args.images, "batch_size": args.batch_size,
                      "slots": args.slots, "workers": args.workers},
           "ring_payload_bytes": ring}
    workdir = tempfile.mkdtemp(prefix="tsock-memory-bench-", dir=args.tmp)
    os.chmod(workdir, 0o700)
    try:
        print(f"making {args.entries} hard links in {workdir} ...", file=sys.stderr)
        root, tree = make_link_tree(args, workdir)
        out["big_tree"] = tree
        cache = os.path.join(workdir, "index.cache")
        # The index does not cache a tree modified in the last 2 s (it could still be
        # changing unnoticed); the last class folders were, so let that pass.
        time.sleep(3)
        print("serving the big tree without an index cache ...", file=sys.stderr)
        cold = serve(args, root, workdir, "cold", 0, args.batches, cache)
        out["cache_file_bytes"] = os.path.getsize(cache) if os.path.exists(cache) else None
        print("serving the big tree with the index cache ...", file=sys.stderr)
        warm = serve(args, root, workdir, "cached", 0, args.batches, cache)
        out["index_cold"] = big_run_summary(cold, args.slots)
        out["index_cached"] = big_run_summary(warm, args.slots)
        t0 = time.monotonic()
        shutil.rmtree(root)
        out["big_tree"]["seconds_to_remove"] = time.monotonic() - t0

        print(f"serving {args.epochs} epochs of {args.images} images ...", file=sys.stderr)
        small = os.path.join(workdir, "small")
        summary = mkdataset(args, small, args.images, 10)
        ep = serve(args, small, workdir, "epochs", args.epochs)
        final = ep["records"][-1]
        per_epoch_batches = -(-final["dataset_samples"] // args.batch_size)
        iv = [r for r in ep["records"] if r.get("type") == "interval"]
        out["epochs_run"] = {
            "dataset": {k: summary.get(k) for k in ("images", "mean_bytes", "mean_width",
                                                    "mean_height", "source", "photos_fallback")},
            "epochs": final["epochs"],
            "batches": final["batches"],
            "wall_s": final["wall_s"],
            "rss_all": rss_summary(ep["records"]),
            "rss_after_first_epoch": rss_summary(ep["records"], per_epoch_batches),
            "max_rss_bytes": final["max_rss_bytes"],
            "rss_trace": [[r["epochs"], r["batches"], r["rss_bytes"]] for r in iv],
            "command": ep["command"],
            "consumer_exit": ep["consumer_exit"],
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")

    c, w, e = out["index_cold"], out["index_cached"], out["epochs_run"]
    print(f"index of {c['dataset_samples']} entries: built in {c['index_s']:.1f} s "
          f"({c['scan_rate_files_per_s']:.0f} files/s), from cache in {w['index_s']:.2f} s "
          f"(cache file {mib(out['cache_file_bytes'] or 0):.1f} MiB); "
          f"{c['index_bytes_per_sample']:.1f} bytes/sample ({mib(c['index_bytes']):.1f} MiB)")
    for name, r in (("no cache", c), ("cached", w)):
        p = r["proc_status_mid_run"]
        print(f"big tree, {name}: RSS first {mib(r['rss']['first_bytes']):.1f} MiB, last "
              f"{mib(r['rss']['last_bytes']):.1f}, max {mib(r['rss']['max_bytes']):.1f} "
              f"(peak {mib(r['max_rss_bytes']):.1f}); mid-run anon "
              f"{mib(p.get('RssAnon', 0)):.1f} MiB, shmem {mib(p.get('RssShmem', 0)):.1f} MiB, "
              f"file {mib(p.get('RssFile', 0)):.1f} MiB; ring {mib(ring):.1f} MiB")
    a = e["rss_after_first_epoch"] or e["rss_all"]
    if a is None:
        print("epochs run: too short for an interval record (raise --epochs)")
    else:
        print(f"{e['epochs']} epochs: RSS after the first epoch {mib(a['first_bytes']):.1f} MiB, "
              f"at the end {mib(a['last_bytes']):.1f} MiB, max {mib(a['max_bytes']):.1f} MiB "
              f"(growth {a['last_minus_first_bytes'] / 1024:.0f} KiB)")
    print(f"written: {args.out}")
    warn_fallback(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
