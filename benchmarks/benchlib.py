"""What the benchmark scripts share: the machine's description and the commit measured, the
programs they run, and the image tree they make."""
import json
import os
import platform
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def machine():
    """Cores, CPU model, kernel, Python and the load average when the run started."""
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu_model": model, "kernel": platform.release(),
            "python": platform.python_version(), "load_avg_at_start": os.getloadavg()}


def git_commit():
    """The checkout's commit, with "-dirty" when libtsock/, producer/ or include/ differ."""
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "libtsock",
                                "producer", "include"], capture_output=True, text=True,
                               timeout=10).stdout.strip()
        return head + ("-dirty" if dirty else "") if head else None
    except (OSError, subprocess.SubprocessError):
        return None


def last_json(text):
    """The last line of `text` that is a JSON object (the programs print their summary last)."""
    lines = [line for line in text.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"no JSON in {text[-2000:]!r}")
    return json.loads(lines[-1])


def make_tree(args, workdir):
    """Writes the benchmark's ImageFolder tree with tsock-mkdataset (args.mkdataset,
    args.images, args.classes, and args.photos when that folder exists). Returns (the tree's
    path, tsock-mkdataset's JSON summary, the command)."""
    out = os.path.join(workdir, "tree")
    cmd = [args.mkdataset, out, "--images", str(args.images), "--classes", str(args.classes),
           "--json"]
    if args.photos and os.path.isdir(args.photos):
        cmd += ["--photos", args.photos]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"tsock-mkdataset failed ({r.returncode}): {r.stderr}")
    return out, last_json(r.stdout), cmd


def add_tree_args(ap, classes=10):
    """The options of the image tree a benchmark reads (see make_tree)."""
    ap.add_argument("--root", help="an existing ImageFolder tree (default: make one)")
    ap.add_argument("--images", type=int, default=800, help="images in the tree made (800)")
    ap.add_argument("--classes", type=int, default=classes)
    ap.add_argument("--photos", default="/usr/share/backgrounds",
                    help="tsock-mkdataset --photos DIR when it exists ('' for synthetic)")


def find_programs(ap, args, *more):
    """Sets args.producer, args.consume and args.mkdataset from args.bin_dir, and stops with
    a usage error unless they and the paths in `more` are executables."""
    args.producer = os.path.join(args.bin_dir, "tsock-producer")
    args.consume = os.path.join(args.bin_dir, "tsock-consume")
    args.mkdataset = os.path.join(args.bin_dir, "tsock-mkdataset")
    for prog in (args.producer, args.consume, args.mkdataset, *more):
        if not os.access(prog, os.X_OK):
            ap.error(f"{prog} is not an executable (build first, or give --bin-dir)")
