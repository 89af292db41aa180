"""What the benchmark scripts share: the machine's description and the commit measured, the
programs they run, and the image tree they make."""
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The natural photographs the published figures were measured on: Debian's mate-backgrounds
# package (JPEG photographs under /usr/share/backgrounds/mate), cropped by tsock-mkdataset.
PHOTOS_DIR = "/usr/share/backgrounds"
PHOTOS_PACKAGE = "mate-backgrounds"


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


def emit(result, out=None):
    """Prints a benchmark's result as indented JSON and, when `out` is given, writes it there."""
    text = json.dumps(result, indent=1)
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")


def last_json(text):
    """The last line of `text` that is a JSON object (the programs print their summary last)."""
    lines = [line for line in text.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"no JSON in {text[-2000:]!r}")
    return json.loads(lines[-1])


# The torchvision baseline's harness, run in a fresh python3 (argv: root workers batch epochs
# seed): an ImageFolder through a DataLoader, 224 x 224 batches counted; prints one JSON line
# with the samples, wall and CPU seconds (main process and workers) and the versions.
# @TRANSFORM@ stands for the lines that set `tf`, the transform measured.
_TORCHVISION_HARNESS = r"""
import json, resource, sys, time
import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

root, workers, batch, epochs, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    int(sys.argv[4]), int(sys.argv[5])

def cpu():
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime

torch.manual_seed(seed)
s0, c0 = cpu()
w0 = time.monotonic()
@TRANSFORM@
ds = datasets.ImageFolder(root, transform=tf)
loader = DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers)
samples = 0
first = None
for epoch in range(epochs):
    for images, labels in loader:
        assert images.shape[1:] == (3, 224, 224)
        if first is None:
            first = time.monotonic()
        samples += images.shape[0]
wall = time.monotonic() - w0
del loader
s1, c1 = cpu()
print(json.dumps({"samples": samples, "wall_s": wall, "main_cpu_s": s1 - s0,
                  "workers_cpu_s": c1 - c0, "cpu_s": (s1 - s0) + (c1 - c0),
                  "images_per_s_after_first_batch": (samples - batch) / (time.monotonic() - first)
                  if samples > batch else None,
                  "dtype": str(images.dtype) if samples else None,
                  "torch": torch.__version__,
                  "torchvision": __import__("torchvision").__version__,
                  "pillow": __import__("PIL").__version__}))
"""


def run_torchvision_baseline(transform, root, workers, batch_size, epochs, seed=0):
    """Runs the torchvision baseline with `transform` (Python lines setting `tf`; they may
    import what they use) in a fresh python3. Returns its JSON line plus whole_process_cpu_s
    (the subprocess's CPU as the OS counts it: python start, imports, workers, a cross-check)
    and cpu_ms_per_image."""
    script = _TORCHVISION_HARNESS.replace("@TRANSFORM@", transform.strip("\n"))
    cmd = [sys.executable, "-c", script, root, str(workers), str(batch_size), str(epochs),
           str(seed)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise RuntimeError(f"torchvision baseline failed ({r.returncode}): {r.stderr[-3000:]}")
    res = last_json(r.stdout)
    res["whole_process_cpu_s"] = (after.ru_utime + after.ru_stime) - (before.ru_utime +
                                                                      before.ru_stime)
    res["cpu_ms_per_image"] = 1e3 * res["cpu_s"] / res["samples"]
    return res


def serve_and_consume(pcmd, ccmd, stats, consume_timeout=1800):
    """Runs one producer (`pcmd`, which writes its --stats-json records to `stats`) and one
    consumer (`ccmd`) against it, the consumer in the foreground. Returns the producer's final
    stats record and the consumer's CompletedProcess. A program that fails raises RuntimeError
    with its exit status and stderr (the consumer's JSON error too); the producer never
    outlives the call (SIGTERM, then kill)."""
    prod = subprocess.Popen(pcmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        c = subprocess.run(ccmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=consume_timeout)
        if c.returncode != 0:
            try:
                error = last_json(c.stdout).get("error")
            except RuntimeError:
                error = None
            raise RuntimeError(f"tsock-consume exit {c.returncode}: {error} {c.stderr}")
        _, perr = prod.communicate(timeout=120)
        if prod.returncode != 0:
            raise RuntimeError(f"tsock-producer exit {prod.returncode}: {perr}")
    finally:
        if prod.poll() is None:
            prod.send_signal(signal.SIGTERM)
            try:
                prod.wait(timeout=10)
            except subprocess.TimeoutExpired:
                prod.kill()
    with open(stats) as f:
        final = [json.loads(line) for line in f if line.strip()][-1]
    if final.get("type") != "final":
        raise RuntimeError("the producer's stats file has no final record")
    return final, c


def _has_jpegs(folder):
    for _, _, files in os.walk(folder):
        if any(f.lower().endswith((".jpg", ".jpeg")) for f in files):
            return True
    return False


def _install_photos():
    """apt-get install mate-backgrounds, as root or through passwordless sudo. Returns None
    or why it could not."""
    if not shutil.which("apt-get"):
        return "no apt-get on this machine"
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    if sudo and not shutil.which("sudo"):
        return "not root and no sudo"
    print(f"benchmark setup: installing {PHOTOS_PACKAGE} (the photographs under {PHOTOS_DIR}) "
          f"with apt-get ...", file=sys.stderr, flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-q"],
                ["apt-get", "install", "-y", "-q", "--no-install-recommends", PHOTOS_PACKAGE]):
        try:
            r = subprocess.run(sudo + cmd, stdin=subprocess.DEVNULL, capture_output=True,
                               text=True, timeout=1800, env=env)
        except (OSError, subprocess.SubprocessError) as e:
            return f"{' '.join(cmd)} failed: {e}"
        if r.returncode != 0:
            return f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-300:]}"
    return None


def _shout(lines):
    bar = "!" * 78
    print("\n".join(["", bar, *[f"!! {line}" for line in lines], bar, ""]), file=sys.stderr,
          flush=True)


def setup_photos(args):
    """The benchmarks' setup step for their image data: makes args.photos usable or says
    loudly that the tree will be synthetic. With the default folder missing, installs
    mate-backgrounds (apt-get; --no-install-photos to refuse). Sets args.photos to '' on a
    fallback and returns the reason (None when the photographs are used), which the
    benchmark records in its JSON ("photos_fallback") and repeats at the end (warn_fallback)."""
    if getattr(args, "photos_checked", False):
        return args.photos_fallback
    args.photos_checked = True
    args.photos_fallback = None
    if not args.photos:
        args.photos_fallback = "--photos '' asked for synthetic files"
        print("benchmark setup: --photos '': tsock-mkdataset's synthetic files, not "
              "photographs", file=sys.stderr)
        return args.photos_fallback
    if _has_jpegs(args.photos):
        return None
    why = f"no JPEG photographs under {args.photos}"
    if args.photos == PHOTOS_DIR and not getattr(args, "no_install_photos", False):
        failed = _install_photos()
        if failed is None and _has_jpegs(args.photos):
            print(f"benchmark setup: {PHOTOS_PACKAGE} installed", file=sys.stderr)
            return None
        why += f", and installing {PHOTOS_PACKAGE} failed: {failed or 'no JPEGs after it'}"
    elif args.photos == PHOTOS_DIR:
        why += " (--no-install-photos)"
    args.photos_fallback = why
    args.photos = ""
    warn_fallback(args)
    return why


def warn_fallback(args):
    """Repeats, loudly, that the run fell back to synthetic files (nothing when it did not)."""
    why = getattr(args, "photos_fallback", None)
    if not why or why.startswith("--photos ''"):
        return
    _shout([f"FELL BACK TO SYNTHETIC FILES: {why}.",
            "tsock-mkdataset's synthetic files carry about three times more JPEG data per",
            "pixel than the photographs docs/benchmarks.md was measured on: these figures are",
            "NOT comparable with the published ones.",
            f"Fix: apt-get install {PHOTOS_PACKAGE} (Debian/Ubuntu), or --photos DIR with JPEG "
            "photographs."])


def make_tree(args, workdir):
    """Writes the benchmark's ImageFolder tree with tsock-mkdataset (args.mkdataset,
    args.images, args.classes, and the photographs of args.photos: see setup_photos).
    Returns (the tree's path, tsock-mkdataset's JSON summary with "photos_fallback" added,
    the command)."""
    setup_photos(args)
    out = os.path.join(workdir, "tree")
    cmd = [args.mkdataset, out, "--images", str(args.images), "--classes", str(args.classes),
           "--json"]
    if args.photos:
        cmd += ["--photos", args.photos]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"tsock-mkdataset failed ({r.returncode}): {r.stderr}")
    summary = last_json(r.stdout)
    summary["photos_fallback"] = args.photos_fallback
    return out, summary, cmd


def add_tree_args(ap, classes=10, images=800):
    """The options of the image tree a benchmark reads (see make_tree)."""
    ap.add_argument("--root", help="an existing ImageFolder tree (default: make one)")
    ap.add_argument("--images", type=int, default=images,
                    help=f"images in the tree made ({images})")
    ap.add_argument("--classes", type=int, default=classes)
    add_photos_args(ap)


def add_photos_args(ap):
    """--photos and --no-install-photos (see setup_photos)."""
    ap.add_argument("--photos", default=PHOTOS_DIR,
                    help=f"tsock-mkdataset --photos DIR ('' for synthetic files); the default "
                         f"folder is installed ({PHOTOS_PACKAGE}) when missing")
    ap.add_argument("--no-install-photos", action="store_true",
                    help=f"never apt-get install {PHOTOS_PACKAGE}: fall back to synthetic "
                         f"files, loudly")


def find_programs(ap, args, *more):
    """Sets args.producer, args.consume and args.mkdataset from args.bin_dir, and stops with
    a usage error unless they and the paths in `more` are executables."""
    args.producer = os.path.join(args.bin_dir, "tsock-producer")
    args.consume = os.path.join(args.bin_dir, "tsock-consume")
    args.mkdataset = os.path.join(args.bin_dir, "tsock-mkdataset")
    for prog in (args.producer, args.consume, args.mkdataset, *more):
        if not os.access(prog, os.X_OK):
            ap.error(f"{prog} is not an executable (build first, or give --bin-dir)")
