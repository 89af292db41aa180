#!/usr/bin/env python3
"""Integration tests of the image pipeline: tsock-producer --dataset imagenet|list on trees
written by tsock-mkdataset, read by tsock-consume --content images.

    pipeline_test.py TEST --producer PATH --consume PATH --mkdataset PATH

Standard library only. Every wait is bounded; no assertion depends on speed.
"""
import json
import os
import shutil
import subprocess
import tempfile
import time

CLASSES = 3
IMAGES = 45  # regular images; --edge-cases adds 7 files per class
BATCH = 16


from itest import Skip, check, run  # the shared harness, beside this file


def io_uring_refused():
    """None when this kernel lets this process set up an io_uring (asked directly, not through
    tsock), else why not."""
    import ctypes
    nr = {"x86_64": 425, "aarch64": 425}.get(os.uname().machine)
    if nr is None:
        return f"io_uring_setup's number on {os.uname().machine} is not known here"
    libc = ctypes.CDLL(None, use_errno=True)
    params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
    fd = libc.syscall(nr, 4, params)
    if fd < 0:
        return f"io_uring_setup fails: {os.strerror(ctypes.get_errno())}"
    os.close(fd)
    return None


class Env:
    def __init__(self, args, test):
        self.args = args
        self.dir = tempfile.mkdtemp(prefix=f"tsock-pl-{test}-")
        self.ipc = "ipc://" + os.path.join(self.dir, "p.sock")
        self.procs = []
        self.log = []

    def path(self, name):
        return os.path.join(self.dir, name)

    def mkdataset(self, name, *extra):
        out = self.path(name)
        r = subprocess.run([self.args.mkdataset, out, "--images", str(IMAGES), "--classes",
                            str(CLASSES), "--seed", "3", *extra], capture_output=True, text=True,
                           timeout=120)
        check(r.returncode == 0, f"tsock-mkdataset failed: {r.stderr}")
        return out

    def producer(self, *extra, stats="producer.json"):
        # One epoch unless `extra` says otherwise (the producer's default is until stopped).
        argv = [self.args.producer, "--endpoint", self.ipc, "--epochs", "1", "--batch-size", str(BATCH),
                "--slots", "4", "--image-size", "32", "--wait-consumers", "1",
                "--stats-json", self.path(stats), "--heartbeat-ms", "100",
                "--heartbeat-timeout-ms", "2000", *extra]
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        self.procs.append((argv, p))
        return p

    def consume(self, epochs, *extra):
        # The producers here stop after as many epochs as the consumer reads, so a consumer
        # the library paused between epochs (a slow step on a loaded machine outlasting the
        # 100 ms grace) would miss the batches published meanwhile: these tests are about the
        # pipeline, not pausing, so the grace is long.
        argv = [self.args.consume, "--endpoint", self.ipc, "--content", "images", "--epochs",
                str(epochs), "--json", "--quiet", "--timeout-ms", "60000",
                "--connect-timeout-ms", "60000", "--epoch-grace-ms", "30000", *extra]
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=120)
        self.log.append((argv, r.returncode, r.stdout, r.stderr))
        lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
        check(lines, f"tsock-consume printed no JSON (exit {r.returncode}): {r.stderr}")
        return r.returncode, json.loads(lines[-1])

    def finish(self, p, timeout=60):
        out, err = p.communicate(timeout=timeout)
        self.log.append(("producer", p.returncode, out, err))
        return p.returncode, err

    def stats(self, name="producer.json"):
        with open(self.path(name)) as f:
            records = [json.loads(l) for l in f.read().splitlines() if l.strip()]
        check(records and records[-1]["type"] == "final", f"{name}: no final record")
        return records[-1]

    def serve(self, tree, epochs, *extra, stats="producer.json"):
        """One producer on `tree`, one consumer for `epochs` epochs; returns both results."""
        p = self.producer("--dataset", "imagenet", "--root", tree, "--epochs", str(epochs),
                          *extra, stats=stats)
        try:
            rc, res = self.consume(epochs)
            prc, err = self.finish(p)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        return rc, res, prc, err, self.stats(stats)

    def cleanup(self):
        for _, p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def dump(self):
        for argv, rc, out, err in self.log:
            print(f"---- {argv if isinstance(argv, str) else ' '.join(argv)}: exit {rc}")
            if out:
                print(out[-4000:])
            if err:
                print(err[-4000:])


def test_edge_cases(env):
    """Every edge case: the non-images and empty files are left out at index time and named;
    grayscale, CMYK, progressive and PNG files are served; truncated files are named once,
    then replaced in every epoch (each shows as one duplicate and one missing id)."""
    tree = env.mkdataset("tree", "--edge-cases")
    rc, res, prc, err, st = env.serve(tree, 2)
    samples = IMAGES + 5 * CLASSES
    check(prc == 0, f"producer exit {prc}")
    check(res["epochs"] == 2 and res["per_epoch_samples"] == [samples] * 2,
          f"epochs {res['epochs']} {res['per_epoch_samples']}")
    check(res["label_errors"] == 0 and res["index_errors"] == 0 and res["layout_errors"] == 0,
          "labels and ids in range")
    check(res["duplicates"] == 2 * CLASSES and res["missing"] == 2 * CLASSES,
          f"duplicates {res['duplicates']} missing {res['missing']}: one per truncated file "
          "per epoch")
    check(rc == 3, f"tsock-consume flags the replaced samples (exit {rc})")
    pl = st["pipeline"]
    check(st["dataset_samples"] == samples, f"index holds {st['dataset_samples']}")
    check(pl["not_image_at_index"] == CLASSES and pl["left_out_at_index"] == 2 * CLASSES,
          f"left out at index: {pl}")
    check(pl["bad_files"] == CLASSES and pl["replaced"] == 2 * CLASSES, f"bad files: {pl}")
    named = [l for l in err.splitlines() if "left out" in l]
    check(sum("corrupt or truncated beyond repair" in l for l in named) == CLASSES,
          "each truncated file is named once")
    check(sum("not an image" in l for l in named) == CLASSES, "each non-image file is named")
    check(sum("left out (empty file):" in l for l in named) == CLASSES,
          "each empty file is named")


def test_determinism(env):
    """The same seed gives byte-identical epochs with 1 worker and pread as with 2 workers and
    io_uring (auto); another seed gives other bytes."""
    tree = env.mkdataset("tree")
    digests = []
    for extra in (["--workers", "1", "--io", "pread"], ["--workers", "2", "--io", "auto"],
                  ["--workers", "2", "--io", "auto", "--seed", "1"]):
        rc, res, prc, _, st = env.serve(tree, 2, *extra, stats=f"s{len(digests)}.json")
        check(rc == 0 and prc == 0, f"{extra}: consumer exit {rc}, producer exit {prc}")
        check(len(res["epoch_digests"]) == 2, f"{extra}: {res['epoch_digests']}")
        digests.append(res["epoch_digests"])
        mode = st["pipeline"]["read_mode"]
        print(f"{extra}: read mode {mode}")
        if "pread" in extra:
            check(mode == "pread", f"--io pread read with {mode}")
        else:  # that auto picks io_uring where it can is test_io_uring's to confirm
            check(mode in ("uring", "pread"), f"--io auto: read mode {mode!r}")
    check(digests[0] == digests[1], f"workers/io change the bytes: {digests[0]} {digests[1]}")
    check(digests[0][0] != digests[0][1], "two epochs with the same crops")
    check(digests[2] != digests[0], "another seed gives the same bytes")


def test_io_uring(env):
    """Where the kernel allows io_uring, --io uring and --io auto both read with it (the final
    record's read_mode says which reader ran) and deliver the same bytes as pread. Skipped,
    loudly, where the kernel refuses io_uring or this build has no io_uring."""
    why = io_uring_refused()
    if why:
        raise Skip(f"{why}: io_uring cannot be confirmed here")
    tree = env.mkdataset("tree")
    digests = {}
    for io in ("uring", "auto", "pread"):
        rc, res, prc, err, st = env.serve(tree, 1, "--workers", "1", "--io", io,
                                          stats=f"{io}.json")
        if io == "uring" and prc != 0 and "built without io_uring" in err:
            raise Skip("this build has no io_uring (liburing was not found at configure time)")
        check(rc == 0 and prc == 0, f"--io {io}: consumer exit {rc}, producer exit {prc}")
        mode = st["pipeline"]["read_mode"]
        print(f"--io {io}: read mode {mode}, {st['pipeline']['files_read']} files read")
        check(mode == ("pread" if io == "pread" else "uring"), f"--io {io} read with {mode}")
        check(st["pipeline"]["files_read"] > 0, f"--io {io}: no file read")
        digests[io] = res["epoch_digests"]
    check(digests["uring"] == digests["auto"] == digests["pread"],
          f"io_uring and pread give other bytes: {digests}")


def test_on_error_fail(env):
    """--on-error fail: the producer stops at the first bad file, names it, exits 1; the
    consumer is told the producer stopped."""
    tree = env.mkdataset("tree", "--edge-cases")
    p = env.producer("--dataset", "imagenet", "--root", tree, "--epochs", "1", "--on-error",
                     "fail")
    try:
        rc, res = env.consume(1)
        prc, err = env.finish(p)
    finally:
        if p.poll() is None:
            p.kill()
    check(prc == 1, f"producer exit {prc}")
    check("corrupt or truncated beyond repair" in err and ".JPEG" in err,
          f"the bad file is not named: {err[-2000:]}")
    check(rc == 1 and res["error"], f"consumer exit {rc}: {res['error']}")
    check(env.stats()["error"], "the final record has the error")


def test_index_cache(env):
    """--index-cache: the second run loads the index instead of scanning and checking."""
    tree = env.mkdataset("tree", "--edge-cases")
    past = time.time() - 3600  # a tree modified seconds ago is not cached (it may still change)
    for root, dirs, _ in os.walk(tree):
        for d in dirs:
            os.utime(os.path.join(root, d), (past, past))
    os.utime(tree, (past, past))
    cache = env.path("index.cache")
    for run in range(2):
        rc, res, prc, err, st = env.serve(tree, 1, "--index-cache", cache,
                                          stats=f"c{run}.json")
        check(prc == 0 and res["epochs"] == 1, f"run {run}: producer {prc}, consumer {rc}")
        check(st["pipeline"]["index_from_cache"] == (run == 1), f"run {run}: {st['pipeline']}")
        check(st["pipeline"]["not_image_at_index"] == CLASSES, "counts survive the cache")
        check(os.path.exists(cache), "no cache written")


def test_list(env):
    """--dataset list: samples in the list's order with its labels."""
    tree = env.mkdataset("tree")
    files = sorted(os.path.join(r, f) for r, _, fs in os.walk(tree) for f in fs)[:20]
    lst = env.path("list.txt")
    with open(lst, "w") as f:
        f.write("# path label\n")
        for i, path in enumerate(files):
            f.write(f"{os.path.relpath(path, env.dir)} {i % 4}\n")
    p = env.producer("--dataset", "list", "--list", lst, "--epochs", "1", "--split", "val")
    try:
        rc, res = env.consume(1)
        prc, _ = env.finish(p)
    finally:
        if p.poll() is None:
            p.kill()
    check(rc == 0 and prc == 0, f"consumer {rc}, producer {prc}")
    check(res["per_epoch_samples"] == [20] and res["dataset_size"] == 20, "20 samples")
    check(env.stats()["pipeline"]["classes"] == 4, "labels 0..3")


def test_bad_options(env):
    """Wrong options exit 2 naming the option; a missing dataset or an unwritable statistics
    file exits 1 with a clear message; a full disk under --stats-json is reported."""
    P = env.args.producer
    tree = env.mkdataset("tree")
    # Without --endpoint the producer makes its default endpoint's folder (/tmp/tsock-UID)
    # before it refuses the options: here, in the test's folder, removed with it.
    no_endpoint = dict(os.environ, XDG_RUNTIME_DIR=env.dir)
    usage = [
        (["--dataset", "imagenet"], "--root"),
        (["--dataset", "list"], "--list"),
        (["--dataset", "imagenet", "--root", tree, "--samples", "10"], "--samples"),
        (["--dataset", "list", "--list", "x", "--root", tree], "--root"),
        (["--dataset", "imagenet", "--root", tree, "--list", "x"], "--list"),
        (["--dataset", "synthetic", "--no-flip"], "--no-flip"),
        (["--dataset", "synthetic", "--workers", "2"], "--workers"),
        (["--dataset", "imagenet", "--root", tree, "--crop-scale", "0,1"], "--crop-scale"),
        (["--dataset", "imagenet", "--root", tree, "--crop-scale", "0.9,0.5"], "--crop-scale"),
        (["--dataset", "imagenet", "--root", tree, "--crop-scale", "abc"], "--crop-scale"),
        (["--dataset", "imagenet", "--root", tree, "--crop-scale", "0.5"], "--crop-scale"),
        (["--dataset", "imagenet", "--root", tree, "--io", "mmap"], "--io"),
        (["--dataset", "imagenet", "--root", tree, "--io-depth", "0"], "--io-depth"),
        (["--dataset", "imagenet", "--root", tree, "--workers", "0"], "--workers"),
        (["--dataset", "imagenet", "--root", tree, "--on-error", "ignore"], "--on-error"),
        (["--dataset", "imagenet", "--root", tree, "--entry-points-mb", "x"], "--entry-points-mb"),
        (["--dataset", "imagenet", "--root", tree, "--entry-points-mb", "-1"],
         "--entry-points-mb"),
        (["--dataset", "synthetic", "--entry-points-mb", "0"], "--entry-points-mb"),
        (["--dataset", "imagenet", "--root", tree, "--split", "test"], "--split"),
        (["--dataset", "imagenet", "--root", ""], "--root"),
        (["--dataset", "imagenet", "--root", tree, "--stats-interval", "0"], "--stats-interval"),
        (["--dataset", "imagenet", "--root", tree, "--image-size", "9000"], "--image-size"),
        (["--dataset", "imagenet", "--root", tree, "--device", "gpu"], "--device"),
        (["--dataset", "imagenet", "--root", tree, "--device", "cuda:x"], "--device"),
        # A host ring converts too (no --device): only bad values are refused there.
        (["--dataset", "imagenet", "--root", tree, "--output", "int8"], "--output"),
        (["--dataset", "imagenet", "--root", tree, "--layout", "chw"], "--layout"),
        (["--dataset", "imagenet", "--root", tree, "--output", "uint8", "--normalize"],
         "--normalize"),
        (["--dataset", "imagenet", "--root", tree, "--device", "cuda", "--output", "int8"],
         "--output"),
        (["--dataset", "imagenet", "--root", tree, "--device", "cuda", "--normalize=1,2"],
         "--normalize"),
        (["--dataset", "imagenet", "--root", tree, "--device", "cuda",
          "--normalize=0.5,0.5,0.5,0.2,0,0.2"], "--normalize"),
        (["--dataset", "imagenet", "--root", tree, "--device", "cuda", "--output", "uint8",
          "--normalize"], "--normalize"),
    ]
    for extra, needle in usage:
        r = subprocess.run([P, *extra], capture_output=True, text=True, timeout=10,
                           env=no_endpoint)
        check(r.returncode == 2, f"{extra}: exit {r.returncode}, expected 2")
        check(needle in r.stderr, f"{extra}: message does not name {needle}: {r.stderr!r}")
    missing = env.path("no-such-tree")
    r = subprocess.run([P, "--dataset", "imagenet", "--root", missing], capture_output=True,
                       text=True, timeout=10, env=no_endpoint)
    check(r.returncode == 1 and missing in r.stderr, f"missing tree: {r.returncode} {r.stderr}")
    empty = env.path("empty-tree")
    os.makedirs(os.path.join(empty, "n0"))
    with open(os.path.join(empty, "n0", "a.JPEG"), "w") as f:
        f.write("not a jpeg")
    r = subprocess.run([P, "--dataset", "imagenet", "--root", empty], capture_output=True,
                       text=True, timeout=10, env=no_endpoint)
    check(r.returncode == 1 and "no usable image" in r.stderr, f"no image: {r.stderr}")
    # No such GPU (on any machine): a clear error, exit 1.
    r = subprocess.run([P, "--dataset", "synthetic", "--device", "cuda:1023",
                        "--endpoint", env.ipc], capture_output=True, text=True, timeout=30)
    check(r.returncode == 1 and "GPU" in r.stderr, f"--device cuda:1023: {r.stderr}")
    bad_stats = env.path("no-dir/stats.json")
    r = subprocess.run([P, "--dataset", "synthetic", "--stats-json", bad_stats],
                       capture_output=True, text=True, timeout=10, env=no_endpoint)
    check(r.returncode == 1 and "--stats-json" in r.stderr, f"stats path: {r.stderr}")
    # A full disk: the producer serves its epochs all the same, then says it could not write.
    p = subprocess.Popen([P, "--dataset", "imagenet", "--root", tree, "--endpoint", env.ipc,
                          "--epochs", "1", "--image-size", "32", "--wait-consumers", "1",
                          "--stats-json", "/dev/full", "--stats-interval", "0.05"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    env.procs.append(("full", p))
    rc, res = env.consume(1)
    _, err = p.communicate(timeout=60)
    check(rc == 0 and res["epochs"] == 1, f"consumer under a full disk: {rc}")
    check(p.returncode == 1 and "cannot write" in err, f"full disk: {p.returncode} {err}")


def read_all(fd, sink):
    """Appends everything read from `fd` to `sink` (a list of bytes) until EOF or EIO (the
    writer closed its terminal). Run on a thread, so the writer never blocks on a full pty."""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        sink.append(chunk)


def test_status_line(env):
    """On a terminal the producer shows a live status line, rewritten in place; on a pipe it
    prints none. Either way --stats-json gets interval records before the final one."""
    import pty
    import threading
    tree = env.mkdataset("tree")
    for on_tty in (True, False):
        stats = f"st{int(on_tty)}.json"
        argv = [env.args.producer, "--endpoint", env.ipc, "--dataset", "imagenet", "--root", tree,
                "--epochs", "3", "--batch-size", str(BATCH), "--image-size", "32",
                "--wait-consumers", "1", "--stats-interval", "0.05",
                "--stats-json", env.path(stats)]
        if on_tty:
            master, slave = pty.openpty()
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
            os.close(slave)
            chunks = []
            reader = threading.Thread(target=read_all, args=(master, chunks), daemon=True)
            reader.start()
        else:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        env.procs.append((argv, p))
        rc, _ = env.consume(3, "--delay-ms", "20")
        if on_tty:
            p.wait(timeout=60)
            reader.join(timeout=30)
            os.close(master)
            text = b"".join(chunks).decode(errors="replace")
        else:
            _, text = p.communicate(timeout=60)
        env.log.append((f"producer ({'terminal' if on_tty else 'pipe'})", p.returncode, "", text))
        check(rc == 0, f"consumer exit {rc}")
        if on_tty:
            check("img/s" in text and "\r" in text and "slots" in text and "codec" in text,
                  f"no live status line on a terminal: {text[-1500:]!r}")
        else:
            check("img/s" not in text, f"a status line on a pipe: {text[-1500:]!r}")
        check(p.returncode == 0, f"producer exit {p.returncode}")
        with open(env.path(stats)) as f:
            kinds = [json.loads(l)["type"] for l in f if l.strip()]
        check(kinds[-1] == "final" and kinds.count("interval") >= 1,
              f"stats records: {kinds}")


def test_stage_stats(env):
    """CPU per stage (issue 21): the final record splits the workers' decode time between the
    codec and the resampling exactly, counts the reads and the publishing, and gives the CPU of
    each kind of thread; every interval record has the stages per image."""
    tree = env.mkdataset("tree", "--edge-cases")
    p = env.producer("--dataset", "imagenet", "--root", tree, "--epochs", "3", "--workers", "2",
                     "--stats-interval", "0.05")
    rc, _ = env.consume(3, "--delay-ms", "20")  # a few intervals long
    prc, err = env.finish(p)
    # 3: the consumer flags the truncated files' replacements (see test_edge_cases), which
    # the workers read themselves.
    check(rc == 3 and prc == 0, f"consumer exit {rc}, producer exit {prc}: {err}")
    final = env.stats()
    pl = final["pipeline"]
    for key in ("read_cpu_s", "codec_cpu_s", "resample_cpu_s", "driver_cpu_s"):
        check(pl.get(key, 0) > 0, f"pipeline.{key} = {pl.get(key)}")
    split = pl["codec_cpu_s"] + pl["resample_cpu_s"]
    check(abs(split - pl["decode_s"]) <= 1e-5 + 1e-6 * pl["decode_s"],
          f"codec + resample = {split}, decode_s = {pl['decode_s']}")
    check(pl["driver_cpu_s"] <= final["cpu_s"], f"driver {pl['driver_cpu_s']} > process cpu")
    check(final.get("publish_cpu_s", 0) > 0, f"publish_cpu_s = {final.get('publish_cpu_s')}")
    th = final.get("threads_cpu_s")
    check(th and th["decode_worker_threads"] == 2 and th["decode_workers"] > 0 and th["main"] > 0,
          f"threads_cpu_s = {th}")
    # The per-thread figures cover the process (the threads the library joined before the
    # final record, the index scan's helpers, are the only ones missing).
    total = th["main"] + th["decode_workers"] + th["service"] + th["zmq"] + th["other"]
    check(total <= final["cpu_s"] * 1.05 + 0.05, f"threads {total} s > process {final['cpu_s']} s")
    with open(env.path("producer.json")) as f:
        intervals = [json.loads(l) for l in f if l.strip()][:-1]
    staged = [r for r in intervals if r.get("type") == "interval"]
    check(staged and all(set(r["stage_cpu_ms_per_image"]) == {"read", "codec", "resample",
                                                              "publish"} for r in staged),
          f"interval records without stages: {staged[:2]}")


def test_restart_markers(env):
    """Issue 21: a copy of the tree with a restart marker after every MCU (tsock-mkdataset
    --from-folder --restart-interval 1, lossless) gives the same bytes as the tree in every
    epoch, train and val, grayscale, CMYK, progressive (made sequential) and replaced files
    included; nearly every image comes from the restart intervals under its window
    (restart_windows), none on the tree without markers. The output size of 32 makes most
    train crops DCT-scaled, so scaled windows are covered too."""
    tree = env.mkdataset("tree", "--edge-cases")
    marked = env.path("marked")
    r = subprocess.run([env.args.mkdataset, marked, "--from-folder", tree, "--restart-interval",
                        "1"], capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, f"tsock-mkdataset --from-folder failed: {r.stderr}")
    for split in ("train", "val"):
        seen = {}
        for name, root in (("plain", tree), ("marked", marked)):
            rc, res, prc, err, st = env.serve(root, 2, "--split", split,
                                              stats=f"{split}-{name}.json")
            # 3: the truncated files' replacements are flagged (see test_edge_cases)
            check(rc == 3 and prc == 0, f"{split} {name}: consumer exit {rc}, producer {prc}")
            seen[name] = (res["epoch_digests"], st["pipeline"])
        (plain, pl0), (mark, pl1) = seen["plain"], seen["marked"]
        check(len(plain) == 2 and plain == mark,
              f"{split}: restart markers change the bytes: {plain} {mark}")
        check(pl0["restart_windows"] == 0, f"{split}: plain tree {pl0['restart_windows']} windows")
        share = pl1["restart_windows"] / pl1["decoded_cpu"]
        print(f"{split}: {pl1['restart_windows']} of {pl1['decoded_cpu']} images from restart "
              f"windows ({share:.0%})")
        check(share >= 0.7, f"{split}: only {share:.0%} of the images used a restart window")
        # tsock's Huffman decoder took the sequential JPEGs of both trees, and gave none back:
        # the truncated files (no end-of-image marker) and the progressive ones stay libjpeg's.
        for name, pl in (("plain", pl0), ("marked", pl1)):
            took = pl["own_entropy"] / pl["decoded_cpu"]
            check(took >= 0.7 and pl["entropy_redone"] == 0,
                  f"{split} {name}: tsock's Huffman decoder took {took:.0%}, "
                  f"gave back {pl['entropy_redone']}")


def corrupt_entropy_data(path):
    """Flips bits in the middle of a JPEG's entropy-coded data (after its SOS segment), leaving
    markers, stuffing and the end-of-image marker alone: libjpeg decodes it with warnings."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    sos = data.index(b"\xff\xda")
    start = sos + 2 + (data[sos + 2] << 8 | data[sos + 3])
    for i in range(start + (len(data) - start) // 3, start + (len(data) - start) // 3 + 24):
        if data[i] != 0xFF and data[i - 1] != 0xFF and data[i] ^ 0x5A != 0xFF:
            data[i] ^= 0x5A
    with open(path, "wb") as f:
        f.write(data)


def test_entropy_redone(env):
    """Issue 21: a JPEG whose entropy-coded data is corrupt (end-of-image marker intact) is
    given back by tsock's Huffman decoder and decoded again by libjpeg alone, which recovers as
    it always did: the producer serves every epoch, and its final record counts the image in
    entropy_redone each time it is decoded, the others in own_entropy."""
    tree = env.mkdataset("tree")
    jpegs = sorted(os.path.join(d, f) for d, _, fs in os.walk(tree) for f in fs
                   if f.endswith(".JPEG"))
    corrupt_entropy_data(jpegs[len(jpegs) // 2])
    epochs = 2
    rc, res, prc, err, st = env.serve(tree, epochs, "--split", "val", stats="redone.json")
    check(rc == 0 and prc == 0, f"consumer exit {rc}, producer {prc}: {err}")
    pl = st["pipeline"]
    check(pl["entropy_redone"] == epochs,
          f"entropy_redone {pl['entropy_redone']}, expected one per epoch ({epochs})")
    check(pl["own_entropy"] == pl["decoded_cpu"] - epochs,
          f"own_entropy {pl['own_entropy']} of {pl['decoded_cpu']} decoded")


def test_entry_points(env):
    """Issue 21: entry points (--entry-points-mb, default on) give the same bytes as none in
    every epoch, train and val, edge cases included (grayscale, CMYK, progressive, PNG,
    truncated files and their replacements); from the second epoch on most decodes start at
    them (entry_jumps), and their memory is reported (entry_point_bytes)."""
    tree = env.mkdataset("tree", "--edge-cases")
    epochs = 3
    for split in ("train", "val"):
        seen = {}
        for name, extra in (("on", []), ("off", ["--entry-points-mb", "0"])):
            rc, res, prc, err, st = env.serve(tree, epochs, "--split", split, *extra,
                                              stats=f"points-{split}-{name}.json")
            check(rc == 3 and prc == 0, f"{split} {name}: consumer exit {rc}, producer {prc}")
            seen[name] = (res["epoch_digests"], st["pipeline"])
        (on, pl_on), (off, pl_off) = seen["on"], seen["off"]
        check(len(on) == epochs and on == off, f"{split}: entry points change the bytes")
        later = pl_on["own_entropy"] * (epochs - 1) / epochs
        print(f"{split}: {pl_on['entry_jumps']} of {pl_on['own_entropy']} decodes started at "
              f"entry points, {pl_on['entry_point_bytes']} bytes of them")
        check(pl_on["entry_jumps"] >= 0.6 * later,
              f"{split}: {pl_on['entry_jumps']} jumps of {later:.0f} later decodes")
        check(pl_on["entry_point_bytes"] > 0, f"{split}: no entry point memory reported")
        check(pl_off["entry_jumps"] == 0 and pl_off["entry_point_bytes"] == 0,
              f"{split}: --entry-points-mb 0 still used them: {pl_off}")


TESTS = {
    "entry_points": test_entry_points,
    "restart_markers": test_restart_markers,
    "entropy_redone": test_entropy_redone,
    "stage_stats": test_stage_stats,
    "status_line": test_status_line,
    "edge_cases": test_edge_cases,
    "determinism": test_determinism,
    "io_uring": test_io_uring,
    "on_error_fail": test_on_error_fail,
    "index_cache": test_index_cache,
    "list": test_list,
    "bad_options": test_bad_options,
}


if __name__ == "__main__":
    run(__doc__, TESTS, Env, [("producer", True), ("consume", True), ("mkdataset", True)])
