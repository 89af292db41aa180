#!/usr/bin/env python3
"""Integration tests: real tsock-producer and tsock-consume processes over real sockets.

    tsock_integration.py TEST --producer PATH --consume PATH [--garbage PATH] [--stat PATH]

TEST is one of the names in TESTS below. Each test uses its own temporary directory (mode
0700) for the ipc endpoint and the statistics files, and kills whatever it started in a
finally block. Standard library only.

The assertions are about behaviour (exit codes, what the consumers verified, what the
producer reports, which files exist); waits are bounded so a hang fails instead of blocking,
and no assertion depends on how fast something ran. How fast a consumer notices a dead producer
is printed, not asserted: the consumers wait for batches forever (--timeout-ms -1), so only the
liveness mechanism can end them, and the error they end with says which one did.
"""
import json
import os
import random
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time

TSOCK_E_PRODUCER_LOST = -10003
TSOCK_E_PRODUCER_STOPPED = -10004
ETIMEDOUT = 110

# Small batches and images keep every test well under 30 s on two cores.
SAMPLES = 2048
IMAGE = 16
BATCH = 32
BATCHES_PER_EPOCH = SAMPLES // BATCH


from itest import Failure, check, run  # the shared harness, beside this file


class Proc:
    """A child process whose stdout and stderr are collected by background threads."""

    def __init__(self, name, argv):
        self.name = name
        self.argv = argv
        self.out = []
        self.err = []
        self.lock = threading.Lock()
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, errors="replace")
        self.pid = self.p.pid
        self.threads = [threading.Thread(target=self._pump, args=(self.p.stdout, self.out),
                                         daemon=True),
                        threading.Thread(target=self._pump, args=(self.p.stderr, self.err),
                                         daemon=True)]
        for t in self.threads:
            t.start()

    def _pump(self, stream, sink):
        for line in stream:
            with self.lock:
                sink.append(line.rstrip("\n"))

    def running(self):
        return self.p.poll() is None

    def wait(self, timeout, what=None):
        try:
            rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise Failure(f"{self.name} did not exit within {timeout} s"
                          + (f" ({what})" if what else ""))
        for t in self.threads:
            t.join(timeout=5)
        return rc

    def stdout(self):
        with self.lock:
            return "\n".join(self.out)

    def stderr(self):
        with self.lock:
            return "\n".join(self.err)

    def wait_stderr(self, text, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if any(text in line for line in self.err):
                    return
            if not self.running():
                break
            time.sleep(0.02)
        raise Failure(f"{self.name} never printed '{text}' (exit code {self.p.poll()})")

    def json(self):
        lines = [l for l in self.stdout().splitlines() if l.strip().startswith("{")]
        check(lines, f"{self.name} printed no JSON object")
        return json.loads(lines[-1])

    def signal(self, sig):
        if self.running():
            self.p.send_signal(sig)

    def kill(self):
        if self.running():
            self.p.kill()
            try:
                self.p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


class Env:
    def __init__(self, args, test):
        self.args = args
        self.test = test
        self.dir = tempfile.mkdtemp(prefix=f"tsock-it-{test}-")  # mode 0700
        os.chmod(self.dir, 0o700)
        self.sock = os.path.join(self.dir, "producer.sock")
        self.ipc = "ipc://" + self.sock
        self.procs = []

    def path(self, name):
        return os.path.join(self.dir, name)

    def producer(self, *extra, endpoint=None, name="producer", stats=None, hb=True,
                 samples=SAMPLES, batch=BATCH, slots=4, image=IMAGE):
        # "--epochs 1" first: the tests were written for a producer that serves one epoch
        # unless told otherwise (tsock-producer's default is now 0, until stopped); an
        # "--epochs" in `extra` comes later and wins.
        argv = [self.args.producer, "--dataset", "synthetic", "--endpoint", endpoint or self.ipc,
                "--epochs", "1", "--samples", str(samples), "--image-size", str(image),
                "--batch-size", str(batch), "--slots", str(slots)]
        if hb:
            argv += ["--heartbeat-ms", "100", "--heartbeat-timeout-ms", "1000"]
        if stats:
            argv += ["--stats-json", stats]
        p = Proc(name, argv + list(extra))
        self.procs.append(p)
        return p

    def consumer(self, *extra, endpoint=None, name="consumer", hb=True, samples=SAMPLES,
                 grace=True):
        argv = [self.args.consume, "--endpoint", endpoint or self.ipc, "--samples", str(samples),
                "--json", "--quiet", "--name", name]
        if hb:
            argv += ["--heartbeat-ms", "100", "--heartbeat-timeout-ms", "1000"]
        if grace:
            # Against producers that stop after as many epochs as the consumer reads, a
            # consumer paused between epochs (a stall on a loaded machine outlasting the
            # default 100 ms grace) would miss batches: only the pausing tests want that.
            argv += ["--epoch-grace-ms", "30000"]
        p = Proc(name, argv + list(extra))
        self.procs.append(p)
        return p

    def cleanup(self):
        for p in self.procs:
            p.kill()
        for root, dirs, files in os.walk(self.dir, topdown=False):
            for f in files:
                try:
                    os.unlink(os.path.join(root, f))
                except OSError:
                    pass
            for d in dirs:
                try:
                    os.rmdir(os.path.join(root, d))
                except OSError:
                    pass
        try:
            os.rmdir(self.dir)
        except OSError:
            pass

    def dump(self):
        for p in self.procs:
            print(f"---- {p.name}: {' '.join(p.argv)}\n     exit code {p.p.poll()}")
            if p.stdout():
                print("     stdout:\n" + p.stdout())
            if p.stderr():
                print("     stderr:\n" + p.stderr())


def shm_objects(pid):
    """(path, inode) of every /dev/shm/tsock-* object process `pid` has mapped."""
    found = set()
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].startswith("/dev/shm/tsock-"):
                path = parts[5].strip()
                if path.endswith(" (deleted)"):
                    continue
                found.add((path, int(parts[4])))
    return found


def shm_exists(obj):
    path, inode = obj
    try:
        return os.stat(path).st_ino == inode
    except FileNotFoundError:
        return False


def free_tcp_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_stats(path):
    """The producer's final record: the last line of its --stats-json file (one JSON object
    per line: interval records, then the final one)."""
    check(os.path.exists(path), f"the producer wrote no statistics file {path}")
    with open(path) as f:
        lines = [line for line in f.read().splitlines() if line.strip()]
    check(lines, f"the statistics file {path} is empty")
    records = [json.loads(line) for line in lines]
    check(all(r.get("type") == "interval" for r in records[:-1]),
          "every record but the last is an interval record")
    check(records[-1].get("type") == "final", "the last record is the final one")
    return records[-1]


def check_clean(res, name, epochs):
    """A consumer's JSON after a complete, clean run of `epochs` epochs."""
    for key in ("content_errors", "label_errors", "index_errors", "duplicates", "missing",
                "out_of_order"):
        check(res[key] == 0, f"{name}: {key} = {res[key]}")
    check(res["error"] is None, f"{name}: error {res['error']!r}")
    check(res["epochs"] == epochs, f"{name}: {res['epochs']} epochs, expected {epochs}")
    check(res["per_epoch_samples"] == [SAMPLES] * epochs,
          f"{name}: per-epoch samples {res['per_epoch_samples']}")
    check(res["samples"] == SAMPLES * epochs, f"{name}: {res['samples']} samples")
    check(res["batches"] == BATCHES_PER_EPOCH * epochs, f"{name}: {res['batches']} batches")
    lat = res["next_latency_us"]
    check(0 < lat["p50"] <= lat["p99"] <= lat["max"], f"{name}: latency figures {lat}")


def check_no_content_errors(res, name):
    for key in ("content_errors", "label_errors", "index_errors", "duplicates", "out_of_order"):
        check(res[key] == 0, f"{name}: {key} = {res[key]}")


# ---- tests ------------------------------------------------------------------------------------

def test_three_consumers(env):
    stats = env.path("stats.json")
    prod = env.producer("--wait-consumers", "3", "--epochs", "3", stats=stats)
    prod.wait_stderr("serving", 10)
    # The socket file and the ring are private to the user.
    check(stat.S_IMODE(os.stat(env.sock).st_mode) == 0o600,
          f"socket file mode {oct(os.stat(env.sock).st_mode)}")
    shm = shm_objects(prod.pid)
    check(shm, "the producer maps no /dev/shm/tsock-* object")
    for path, _ in shm:
        check(stat.S_IMODE(os.stat(path).st_mode) == 0o600, f"{path} mode is not 0600")
    cons = [env.consumer("--epochs", "3", "--delay-ms", str(d), name=f"consumer-delay{d}")
            for d in (0, 1, 3)]
    results = []
    for c in cons:
        rc = c.wait(25)
        res = c.json()
        results.append(res)
        check(rc == 0, f"{c.name} exit code {rc}")
        check_clean(res, c.name, 3)
    rc = prod.wait(15)
    check(rc == 0, f"producer exit code {rc}")
    st = read_stats(stats)
    total = BATCHES_PER_EPOCH * 3
    check(st["batches"] == total, f"producer published {st['batches']} batches, expected {total}")
    check(st["samples"] == SAMPLES * 3, f"producer samples {st['samples']}")
    check(st["epochs"] == 3, f"producer epochs {st['epochs']}")
    check(st["consumers_joined"] == 3, f"consumers_joined {st['consumers_joined']}")
    check(st["consumers_lost"] == 0, f"consumers_lost {st['consumers_lost']}")
    check(st["finished"] is True, "the producer did not report a finished run")
    for key in ("cpu_s", "wall_s", "bad_messages", "acquire_wait_s"):
        check(key in st, f"statistics lack {key}")
    pids = {c.pid for c in cons}
    check({r["pid"] for r in st["consumers"]} == pids,
          f"per-consumer pids {[r['pid'] for r in st['consumers']]} != {sorted(pids)}")
    # The library lists only connected consumers, so the producer's figures for a consumer
    # are those of its last sample before the consumer left: at most a ring's worth (4 slots)
    # behind. What each consumer really received is checked from its own report above.
    for r in st["consumers"]:
        check(total - 4 <= r["batches"] <= total,
              f"consumer {r['id']} was sent {r['batches']} batches of {total}")
        check(r["batches"] - 4 <= r["released"] <= r["batches"],
              f"consumer {r['id']} released {r['released']} of {r['batches']}")
    # A clean stop removes the ring and the socket file.
    check(not os.path.exists(env.sock), "socket file left behind")
    for obj in shm:
        check(not shm_exists(obj), f"{obj[0]} left behind")


def test_host_ring_converted(env):
    """--output float16 --layout nchw --normalize on a host ring (no GPU): the producer converts
    once for every consumer; tsock-consume --normalize checks every element of every batch
    against that conversion of the synthetic bytes. Before, the producer refused the flags
    without --device cuda."""
    prod = env.producer("--wait-consumers", "2", "--epochs", "2", "--output", "float16",
                        "--layout", "nchw", "--normalize")
    cons = [env.consumer("--epochs", "2", "--normalize", "--delay-ms", str(d),
                         name=f"converted-{d}") for d in (0, 1)]
    for c in cons:
        rc = c.wait(60)
        res = c.json()
        check(rc == 0, f"{c.name} exit code {rc}")
        check_clean(res, c.name, 2)
    check(prod.wait(20) == 0, "producer exit code")


def test_kill_consumer(env):
    stats = env.path("stats.json")
    # 4 slots, 192 batches: the producer can only finish if the dead consumer's slots come back.
    prod = env.producer("--wait-consumers", "3", "--epochs", "3", stats=stats)
    prod.wait_stderr("serving", 10)
    good = [env.consumer("--epochs", "3", "--delay-ms", str(d), name=f"consumer-delay{d}")
            for d in (0, 1)]
    # A long epoch grace: a loaded run can start the victim late enough for the library to
    # pause it as a job that never read (docs/semantics.md), and then it holds nothing.
    victim = env.consumer("--epochs", "3", "--delay-ms", "50", "--epoch-grace-ms", "30000",
                          name="victim")
    # The victim holds everyone to its pace (slack is 4 slots), so 1 s in is early in epoch 0.
    time.sleep(1.0)
    check(victim.running(), "the slow consumer ended before it could be killed")
    check(prod.running(), "the producer ended before the slow consumer was killed")
    victim.kill()
    for c in good:
        rc = c.wait(25)
        res = c.json()
        check(rc == 0, f"{c.name} exit code {rc}")
        check_clean(res, c.name, 3)
    rc = prod.wait(15)
    check(rc == 0, f"producer exit code {rc}")
    st = read_stats(stats)
    check(st["consumers_lost"] == 1, f"consumers_lost = {st['consumers_lost']}, expected 1")
    check(st["consumers_joined"] == 3, f"consumers_joined = {st['consumers_joined']}")
    check(st["batches"] == BATCHES_PER_EPOCH * 3, f"producer published {st['batches']} batches")
    dead = [r for r in st["consumers"] if r["pid"] == victim.pid]
    check(len(dead) == 1, "the killed consumer is missing from the statistics")
    check(0 < dead[0]["batches"] < BATCHES_PER_EPOCH, f"killed consumer record {dead[0]}")


def test_stopped_consumer(env):
    """A consumer that hangs (SIGSTOP: its connection stays open, it just goes silent) is
    dropped after the heartbeat timeout and its slots are reclaimed."""
    stats = env.path("stats.json")
    prod = env.producer("--wait-consumers", "2", "--epochs", "2", stats=stats)
    prod.wait_stderr("serving", 10)
    good = env.consumer("--epochs", "2", "--delay-ms", "1", name="good")
    frozen = env.consumer("--epochs", "2", "--delay-ms", "20", "--epoch-grace-ms", "30000",
                          name="frozen")  # never paused by the library: it holds its slots
    time.sleep(0.5)
    check(frozen.running() and prod.running(), "the run ended before the consumer was stopped")
    frozen.signal(signal.SIGSTOP)
    try:
        rc = good.wait(25)
        res = good.json()
        check(rc == 0, f"{good.name} exit code {rc}")
        check_clean(res, good.name, 2)
        rc = prod.wait(15)
        check(rc == 0, f"producer exit code {rc}")
    finally:
        frozen.kill()
        frozen.signal(signal.SIGCONT)
    st = read_stats(stats)
    check(st["consumers_lost"] == 1, f"consumers_lost = {st['consumers_lost']}, expected 1")
    check(st["batches"] == BATCHES_PER_EPOCH * 2, f"producer published {st['batches']} batches")


def test_kill_producer(env):
    prod = env.producer("--wait-consumers", "2", "--epochs", "0", hb=False)
    prod.wait_stderr("serving", 10)
    shm = shm_objects(prod.pid)
    check(shm, "the producer maps no /dev/shm/tsock-* object")
    # Library default heartbeats on the consumers, and no timeout on next(): only the heartbeat
    # timeout can end them, with TSOCK_E_PRODUCER_LOST.
    cons = [env.consumer("--epochs", "0", "--delay-ms", "1", "--timeout-ms", "-1",
                         name=f"consumer{i}", hb=False) for i in range(2)]
    for c in cons:
        wait_stat(env, f"{c.name} receiving", lambda snap, n=c.name: any(
            x["name"] == n and x["batches"] > 0 for x in snap["consumers"]), timeout=60)
    for c in cons:
        check(c.running(), f"{c.name} ended before the producer was killed: {c.stdout()}")
    killed = time.monotonic()
    prod.p.send_signal(signal.SIGKILL)
    prod.wait(5)
    for c in cons:
        rc = c.wait(60, "after the producer was killed")
        took = time.monotonic() - killed
        res = c.json()
        print(f"{c.name} exited {took:.2f} s after the producer was killed (heartbeat timeout "
              f"3 s)")
        check(rc == 1, f"{c.name} exit code {rc}, expected 1")
        check(res["error"], f"{c.name}: no error text")
        check(res["error_code"] == TSOCK_E_PRODUCER_LOST,
              f"{c.name}: error_code {res['error_code']} ({res['error']}), expected "
              f"TSOCK_E_PRODUCER_LOST")
        check(res["batches"] > 0, f"{c.name} received nothing before the kill")
        check_no_content_errors(res, c.name)
    # The dead producer's ring is removed, at the latest by the next producer on the endpoint.
    prod2 = env.producer("--epochs", "0", name="producer2")
    prod2.wait_stderr("serving", 10)
    for obj in shm:
        check(not shm_exists(obj), f"stale ring {obj[0]} survived a new producer's start")
    # While it runs, a third producer on the same endpoint is refused.
    prod3 = env.producer("--epochs", "0", name="producer3")
    rc = prod3.wait(10)
    check(rc == 1, f"a second live producer on the endpoint exited {rc}, expected 1")
    check(prod2.running(), "the serving producer died when another tried its endpoint")
    shm2 = shm_objects(prod2.pid)
    prod2.signal(signal.SIGTERM)
    rc = prod2.wait(10)
    check(rc == 0, f"producer2 exit code {rc} after SIGTERM")
    check(not os.path.exists(env.sock), "socket file left behind by producer2")
    for obj in shm2:
        check(not shm_exists(obj), f"{obj[0]} left behind by producer2")


def test_sigterm_producer(env):
    stats = env.path("stats.json")
    prod = env.producer("--wait-consumers", "2", "--epochs", "0", stats=stats)
    prod.wait_stderr("serving", 10)
    shm = shm_objects(prod.pid)
    check(shm, "the producer maps no /dev/shm/tsock-* object")
    cons = [env.consumer("--epochs", "0", "--delay-ms", "1", "--timeout-ms", "-1",
                         name=f"consumer{i}") for i in range(2)]
    # Batches the consumer itself returned (it reports them every heartbeat), not only batches
    # sent: a stopped producer's queued batches are dropped unread (issue 12, item 5).
    for c in cons:
        wait_stat(env, f"{c.name} receiving", lambda snap, n=c.name: any(
            x["name"] == n and x["consumed_batches"] > 0 for x in snap["consumers"]),
            timeout=60)
    check(prod.running(), "the producer ended on its own")
    stopped = time.monotonic()
    prod.signal(signal.SIGTERM)
    rc = prod.wait(10, "after SIGTERM")
    check(rc == 0, f"producer exit code {rc} after SIGTERM")
    st = read_stats(stats)
    check(st["batches"] > 0, "the producer published nothing")
    check(st["stopped_by_signal"] == "SIGTERM", f"stopped_by_signal {st['stopped_by_signal']}")
    check(st["consumers_joined"] == 2, f"consumers_joined {st['consumers_joined']}")
    check(not os.path.exists(env.sock), "socket file left behind")
    for obj in shm:
        check(not shm_exists(obj), f"{obj[0]} left behind")
    for c in cons:
        rc = c.wait(60, "after the producer stopped")
        took = time.monotonic() - stopped
        res = c.json()
        check(rc == 1, f"{c.name} exit code {rc}, expected 1")
        check(res["error_code"] == TSOCK_E_PRODUCER_STOPPED,
              f"{c.name}: error_code {res['error_code']} ({res['error']}), expected "
              f"TSOCK_E_PRODUCER_STOPPED")
        print(f"{c.name} exited {took:.2f} s after the SIGTERM")
        check(res["batches"] > 0, f"{c.name} received nothing")
        check_no_content_errors(res, c.name)


def test_tcp_loopback(env):
    endpoint = f"tcp://127.0.0.1:{free_tcp_port()}"
    stats = env.path("stats.json")
    prod = env.producer("--wait-consumers", "2", "--epochs", "2", endpoint=endpoint, stats=stats)
    prod.wait_stderr("serving", 10)
    cons = [env.consumer("--epochs", "2", "--delay-ms", str(d), endpoint=endpoint,
                         name=f"consumer{d}") for d in (0, 1)]
    for c in cons:
        rc = c.wait(25)
        res = c.json()
        check(rc == 0, f"{c.name} exit code {rc}")
        check_clean(res, c.name, 2)
    rc = prod.wait(15)
    check(rc == 0, f"producer exit code {rc}")
    st = read_stats(stats)
    check(st["batches"] == BATCHES_PER_EPOCH * 2, f"producer published {st['batches']} batches")
    check(st["endpoint"] == endpoint, f"producer endpoint {st['endpoint']}")


def test_bad_options(env):
    P, C = env.args.producer, env.args.consume
    cases = [
        ([P, "--dataset", "synthetic", "--batch-size", "0"], "--batch-size"),
        ([P, "--dataset", "synthetic", "--batch-size", "-1"], "--batch-size"),
        ([P, "--dataset", "synthetic", "--batch-size", "12abc"], "--batch-size"),
        ([P, "--dataset", "synthetic", "--slots", "x"], "--slots"),
        ([P, "--dataset", "synthetic", "--slots", "1"], "--slots"),
        ([P, "--dataset", "synthetic", "--samples", "0"], "--samples"),
        ([P, "--dataset", "synthetic", "--image-size", "0"], "--image-size"),
        ([P, "--dataset", "synthetic", "--epochs", "many"], "--epochs"),
        ([P, "--dataset", "synthetic", "--seed", "-5"], "--seed"),
        ([P, "--dataset", "synthetic", "--wait-consumers", "-3"], "--wait-consumers"),
        ([P, "--dataset", "synthetic", "--heartbeat-ms", "0"], "--heartbeat-ms"),
        ([P, "--dataset", "synthetic", "--heartbeat-ms", "500", "--heartbeat-timeout-ms", "100"],
         "--heartbeat-timeout-ms"),
        ([P, "--dataset", "synthetic", "--batch-size", "99999999999999999999999"],
         "--batch-size"),
        ([P, "--dataset", "nope"], "--dataset"),
        ([P, "--dataset", "nope"], "synthetic"),
        ([P], "--dataset"),
        ([P, "--dataset", "synthetic", "--frobnicate"], "--frobnicate"),
        ([P, "--dataset", "synthetic", "stray"], "stray"),
        ([P, "--dataset", "synthetic", "--endpoint"], "--endpoint"),
        ([P, "--dataset", "synthetic", "--endpoint", ""], "--endpoint"),
        # Each GPU-only option named as given (--output uint8 used to be called --layout).
        # A host ring converts too (no --device needed): bad values are what is refused.
        ([P, "--dataset", "synthetic", "--output", "int8"], "--output"),
        ([P, "--dataset", "synthetic", "--layout", "chw"], "--layout"),
        ([P, "--dataset", "synthetic", "--output", "uint8", "--normalize"], "--normalize"),
        ([P, "--dataset", "synthetic", "--normalize=1e39,0,0,1,1,1"], "--normalize"),
        # Values that are finite doubles but not usable floats, or that overflow the output.
        ([P, "--dataset", "synthetic", "--device", "cuda", "--normalize=1e39,0,0,1,1,1"],
         "--normalize"),
        ([P, "--dataset", "synthetic", "--device", "cuda", "--normalize=0,0,0,1,1,-1e39"],
         "--normalize"),
        ([P, "--dataset", "synthetic", "--device", "cuda", "--normalize=0,0,0,1,1e-45,1"],
         "--normalize"),
        ([P, "--dataset", "synthetic", "--device", "cuda", "--normalize=3e38,0,0,0.5,1,1"],
         "--normalize"),
        ([P, "--dataset", "synthetic", "--device", "cuda", "--output", "float16",
          "--normalize=0,0,0,1e-5,1,1"], "--normalize"),
        ([P, "--dataset", "synthetic", "--device", "cuda", "--normalize=nan,0,0,1,1,1"],
         "--normalize"),
        ([P, "--dataset", "synthetic", "--device", "cuda", "--normalize=0,0,0,inf,1,1"],
         "--normalize"),
        ([C, "--epochs", "x"], "--epochs"),
        ([C, "--epochs", "-1"], "--epochs"),
        ([C, "--samples", "0"], "--samples"),
        ([C, "--delay-ms", "-1"], "--delay-ms"),
        ([C, "--timeout-ms", "abc"], "--timeout-ms"),
        ([C, "--timeout-ms", "-2"], "--timeout-ms"),
        ([C, "--connect-timeout-ms", "1.5"], "--connect-timeout-ms"),
        ([C, "--name", ""], "--name"),
        ([C, "--name", "n" * 100], "--name"),
        ([C, "--frobnicate"], "--frobnicate"),
        ([C, "--json", "stray"], "stray"),
        ([C, "--batch-size", "-1"], "--batch-size"),
        ([C, "--batch-size", "4294967296"], "--batch-size"),
        ([C, "--join-after-ms", "soon"], "--join-after-ms"),
        ([C, "--pause-between-epochs-ms", "-5"], "--pause-between-epochs-ms"),
        ([C, "--epoch-grace-ms", "-1"], "--epoch-grace-ms"),
        ([C, "--reconnect-ms", "x"], "--reconnect-ms"),
        ([C, "--drop-last=yes"], "--drop-last"),
        ([C, "--latency-samples", "0"], "--latency-samples"),
    ]
    for argv, needle in cases:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=10)
        shown = " ".join(argv[1:])
        check(r.returncode == 2, f"'{shown}': exit code {r.returncode}, expected 2")
        check(needle in r.stderr, f"'{shown}': message does not name {needle}: {r.stderr!r}")
    for prog in (P, C):
        r = subprocess.run([prog, "--help"], capture_output=True, text=True, timeout=10)
        check(r.returncode == 0 and "usage:" in r.stdout, f"{prog} --help failed")
    # No producer behind the endpoint: the consumer gives up after its connect timeout.
    r = subprocess.run([C, "--endpoint", env.ipc, "--connect-timeout-ms", "300", "--json",
                        "--quiet"], capture_output=True, text=True, timeout=15)
    check(r.returncode == 1, f"consumer without producer: exit code {r.returncode}")
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    check(lines, f"consumer without producer printed no JSON: {r.stdout!r} {r.stderr!r}")
    res = json.loads(lines[-1])
    check(res["error"] and res["error_code"] == -ETIMEDOUT,
          f"consumer without producer: error {res['error_code']} {res['error']!r}")
    # It names the endpoint and what to start, not a bare "Connection timed out".
    check(env.ipc in r.stderr and "tsock-producer" in r.stderr,
          f"consumer without producer: {r.stderr!r}")


def test_stats_json_busy(env):
    """--stats-json is opened only once the producer has started: a producer that fails early
    (no dataset) creates no file and leaves an existing one as it was, and a second producer
    on a busy endpoint does not truncate the running producer's file."""
    P = env.args.producer
    kept = env.path("kept.json")
    with open(kept, "w") as f:
        f.write("an earlier run's records\n")
    missing = env.path("missing.json")
    for path in (kept, missing):
        r = subprocess.run([P, "--dataset", "folder", "--root", env.path("no-such-tree"),
                            "--stats-json", path, "--quiet"], capture_output=True, text=True,
                           timeout=30)
        check(r.returncode == 1, f"producer without a dataset: exit code {r.returncode}")
    with open(kept) as f:
        check(f.read() == "an earlier run's records\n", "a failed producer rewrote the file")
    check(not os.path.exists(missing), "a producer that failed to start created its file")

    stats = env.path("stats.json")
    prod = env.producer("--epochs", "1", "--stats-interval", "0.1", stats=stats)
    prod.wait_stderr("serving", 10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (os.path.exists(stats) and os.path.getsize(stats)):
        time.sleep(0.05)
    with open(stats) as f:
        first = f.readline()
    check(first.startswith("{") and json.loads(first)["type"] == "interval",
          f"no interval record from the running producer: {first!r}")
    second = env.producer("--epochs", "1", stats=stats, name="second")
    rc = second.wait(15)
    check(rc == 1, f"second producer on a busy endpoint: exit code {rc}")
    with open(stats) as f:
        check(f.readline() == first, "the second producer truncated the running one's file")
    cons = env.consumer("--epochs", "1")
    wait_json(cons, 30)
    rc = prod.wait(15)
    check(rc == 0, f"producer exit code {rc}")
    with open(stats) as f:
        lines = f.read().splitlines()
    check(lines[0] == first.rstrip("\n"), "the file lost its first record")
    records = [json.loads(l) for l in lines]
    check(records[-1]["type"] == "final" and records[-1]["samples"] == SAMPLES,
          f"final record: {records[-1]}")


def test_latency_reservoir(env):
    """tsock-consume keeps a bounded sample of next() latencies (--latency-samples), so a run
    with --epochs 0 does not grow without bound, while counting every next and keeping all of
    them when the run is shorter than the sample."""
    samples = 512
    prod = env.producer("--epochs", "2", "--wait-consumers", "2", samples=samples, batch=1)
    small = env.consumer("--epochs", "0", "--latency-samples", "16", name="small",
                         samples=samples)
    full = env.consumer("--epochs", "0", name="full", samples=samples)
    for c in (small, full):
        res = wait_json(c, 60)
        check(res["batches"] == 2 * samples and res["epochs"] == 2,
              f"{c.name}: {res['batches']} batches, {res['epochs']} epochs")
        lat = res["next_latency_us"]
        check(lat["count"] == res["batches"], f"{c.name}: latency count {lat}")
        want = 16 if c is small else res["batches"]
        check(lat["kept"] == want, f"{c.name}: kept {lat['kept']} latencies, expected {want}")
        check(0 <= lat["p50"] <= lat["p99"] <= lat["max"], f"{c.name}: percentiles {lat}")
    check(prod.wait(15) == 0, "producer exit code")


def raw_tcp_garbage(port, rounds, rng):
    """Connects with plain TCP and writes bytes that are not ZMTP (and some that start like it)."""
    for i in range(rounds):
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            if i % 3 == 0:
                # A ZMTP signature, then nonsense instead of the version and mechanism.
                data = b"\xff" + b"\x00" * 8 + b"\x7f" + rng.randbytes(200)
            elif i % 3 == 1:
                data = rng.randbytes(rng.randint(1, 65536))
            else:
                data = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
            try:
                s.sendall(data)
                s.settimeout(0.2)
                s.recv(4096)
            except OSError:
                pass  # the peer may hang up at once: that is the point


def test_garbage_client(env):
    check(env.args.garbage, "--garbage PATH is required for this test")
    port = free_tcp_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    stats = env.path("stats.json")
    prod = env.producer("--epochs", "0", endpoint=endpoint, stats=stats)
    prod.wait_stderr("serving", 10)
    cons = env.consumer("--epochs", "8", "--delay-ms", "3", endpoint=endpoint, name="victim")
    time.sleep(0.3)
    check(cons.running(), f"the consumer ended early: {cons.stdout()}")
    # (i) a ZeroMQ DEALER that speaks nonsense at the tsock level.
    for seed in (1, 2):
        g = Proc(f"garbage{seed}", [env.args.garbage, endpoint, "1000", str(seed)])
        env.procs.append(g)
        rc = g.wait(20)
        check(rc == 0, f"garbage client exit code {rc}: {g.stderr()}")
    # (ii) plain TCP that is not ZeroMQ at all.
    raw_tcp_garbage(port, 12, random.Random(7))
    check(prod.running(), "the producer died from garbage input")
    rc = cons.wait(25)
    res = cons.json()
    check(rc == 0, f"consumer exit code {rc}")
    check_clean(res, cons.name, 8)
    # The producer still accepts and serves a new consumer after all that.
    late = env.consumer("--epochs", "1", endpoint=endpoint, name="late")
    rc = late.wait(20)
    res = late.json()
    check(rc == 0, f"late consumer exit code {rc}")
    check_no_content_errors(res, "late")
    check(res["epochs"] == 1, f"late consumer completed {res['epochs']} epochs")
    prod.signal(signal.SIGTERM)
    rc = prod.wait(10, "after SIGTERM")
    check(rc == 0, f"producer exit code {rc} after SIGTERM")
    st = read_stats(stats)
    check(st["bad_messages"] > 0, f"bad_messages = {st['bad_messages']} after garbage")
    check(st["consumers_joined"] == 2, f"consumers_joined = {st['consumers_joined']} (garbage "
          f"must not count as consumers)")


# ---- tsock-stat -------------------------------------------------------------------------------

def run_stat(env, *args, timeout=20):
    check(env.args.stat, "--stat PATH is required for this test")
    return subprocess.run([env.args.stat] + list(args), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


def stat_json(env, endpoint):
    r = run_stat(env, endpoint, "--json")
    check(r.returncode == 0, f"tsock-stat --json exit code {r.returncode}: {r.stderr!r}")
    lines = r.stdout.splitlines()
    check(len(lines) == 1, f"tsock-stat --json printed {len(lines)} lines: {r.stdout!r}")
    return json.loads(lines[0])


def wait_stat(env, what, cond, timeout=15):
    """Asks tsock-stat until cond(snapshot) holds; the last snapshot either way."""
    deadline = time.monotonic() + timeout
    while True:
        snap = stat_json(env, env.ipc)
        if cond(snap) or time.monotonic() > deadline:
            check(cond(snap), f"tsock-stat never showed {what}: {snap}")
            return snap
        time.sleep(0.1)


def check_snapshot(snap, names, pids, slots):
    p = snap["producer"]
    check(p["slots"] == slots, f"slots {p['slots']}, expected {slots}")
    check(p["slots_in_use"] + p["slots_free"] == slots, f"slot figures {p}")
    check(p["slots_held"] <= p["slots_in_use"], f"held {p['slots_held']} > in use {p}")
    check(p["consumers"] == len(names), f"{p['consumers']} consumers, expected {len(names)}")
    check(p["joined"] == len(names), f"joined {p['joined']}: the stats client counted?")
    check(p["batches"] > 0 and p["samples"] == p["batches"] * BATCH,
          f"producer batches {p['batches']}, samples {p['samples']}")
    check(p["lost"] == 0 and p["bad_messages"] == 0, f"producer figures {p}")
    cons = snap["consumers"]
    check(sorted(c["name"] for c in cons) == sorted(names), f"consumer names {cons}")
    check(sorted(c["pid"] for c in cons) == sorted(pids), f"consumer pids {cons}")
    for c in cons:
        check(c["batches"] > 0, f"{c['name']}: batches {c['batches']}")
        check(c["released"] <= c["batches"], f"{c['name']}: released > batches: {c}")
        check(c["held"] <= slots, f"{c['name']}: held {c['held']} of {slots} slots")
        check(c["lag"] < slots, f"{c['name']}: lag {c['lag']} with {slots} slots")
        check(c["rate"] >= 0 and c["wait_s"] >= 0, f"{c['name']}: figures {c}")
        check(c["consumed_batches"] <= c["batches"], f"{c['name']}: consumed more than sent")


def test_stat_tool(env):
    """tsock-stat against a producer with two consumers: the figures are consistent, and the
    table, --json and --watch agree on who is there."""
    slots = 4
    prod = env.producer("--epochs", "0", slots=slots)
    prod.wait_stderr("serving", 10)
    names = ["stat-a", "stat-b"]
    cons = [env.consumer("--epochs", "0", "--delay-ms", "2", name=n) for n in names]
    pids = [c.pid for c in cons]
    snap = wait_stat(env, "both consumers reporting figures",
                     lambda s: len(s["consumers"]) == 2 and
                     all(c["reported"] and c["consumed_batches"] > 0 for c in s["consumers"]))
    check_snapshot(snap, names, pids, slots)
    check(snap["endpoint"] == env.ipc, f"endpoint {snap['endpoint']}")
    check(snap["status"] is None, f"status {snap['status']!r} without a status set")
    # The producer's figures grow while the consumers work.
    later = wait_stat(env, "more batches", lambda s: s["producer"]["batches"] >
                      snap["producer"]["batches"])
    check_snapshot(later, names, pids, slots)
    # --watch with --count: that many JSON lines, each a snapshot of the same consumers.
    r = run_stat(env, env.ipc, "--watch", "1", "--count", "2", "--json")
    check(r.returncode == 0, f"tsock-stat --watch exit code {r.returncode}: {r.stderr!r}")
    lines = r.stdout.splitlines()
    check(len(lines) == 2, f"--watch 1 --count 2 printed {len(lines)} lines")
    for line in lines:
        check_snapshot(json.loads(line), names, pids, slots)
    # The table names the producer and every consumer.
    r = run_stat(env, env.ipc)
    check(r.returncode == 0, f"tsock-stat exit code {r.returncode}: {r.stderr!r}")
    for needle in ["producer pid", f"slots      {slots}:"] + names + [str(p) for p in pids]:
        check(needle in r.stdout, f"the table lacks {needle!r}:\n{r.stdout}")
    for c in cons:
        check(c.running(), f"{c.name} ended while being watched: {c.stdout()}")
    prod.signal(signal.SIGTERM)
    check(prod.wait(10, "after SIGTERM") == 0, "producer exit code after SIGTERM")


def test_stat_errors(env):
    """No producer: exit 1 with a message, quickly for a missing socket file and after the
    timeout for a socket nobody answers on. Bad options: exit 2 naming the option."""
    r = run_stat(env, "ipc://" + env.path("none.sock"))
    check(r.returncode == 1, f"missing endpoint: exit code {r.returncode}")
    check("no producer" in r.stderr and "none.sock" in r.stderr, f"message {r.stderr!r}")
    # A socket file with nothing answering behind it, as a producer killed by SIGKILL leaves.
    path = env.path("stale.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(1)
    try:
        r = run_stat(env, "ipc://" + path, "--timeout-ms", "300")
    finally:
        s.close()
    check(r.returncode == 1, f"silent endpoint: exit code {r.returncode}")
    check("no producer answered" in r.stderr and "300 ms" in r.stderr, f"message {r.stderr!r}")
    ep = "ipc://" + env.path("x.sock")
    cases = [
        (["--watch", "0"], "--watch"),
        (["--watch=abc"], "--watch"),
        (["--count", "0"], "--count"),
        (["--count"], "--count"),
        (["--timeout-ms", "x"], "--timeout-ms"),
        (["--timeout-ms", "0"], "--timeout-ms"),
        (["--frobnicate"], "--frobnicate"),
        ([ep, ep], "unexpected argument"),
        ([""], "ENDPOINT"),
        (["--json=1"], "--json=1"),
    ]
    for argv, needle in cases:
        r = run_stat(env, *argv)
        shown = " ".join(argv)
        check(r.returncode == 2, f"'{shown}': exit code {r.returncode}, expected 2")
        check(needle in r.stderr, f"'{shown}': message does not name {needle}: {r.stderr!r}")
    r = run_stat(env, "--help")
    check(r.returncode == 0 and "usage:" in r.stdout, "tsock-stat --help failed")


# ---- per-consumer epochs ---------------------------------------------------------------------

ERROR_KEYS = ("content_errors", "label_errors", "index_errors", "layout_errors", "duplicates",
              "missing", "out_of_order", "batch_size_errors", "epoch_size_errors")


def check_exact(res, name, epochs, samples=SAMPLES, batch=BATCH, drop_last=False,
                interrupted=0):
    """A consumer's JSON after `epochs` complete epochs, each exact by its own accounting:
    every sample id once (less the short tail with drop_last), every batch verified byte by
    byte, batch sizes and batch counts as the library announced and as they must be."""
    for key in ERROR_KEYS:
        check(res[key] == 0, f"{name}: {key} = {res[key]}")
    check(res["error"] is None, f"{name}: error {res['error']!r}")
    check(res["exit_code"] == 0, f"{name}: exit code {res['exit_code']}")
    check(res["epochs"] == epochs, f"{name}: {res['epochs']} epochs, expected {epochs}")
    check(res["interrupted_epochs"] == interrupted,
          f"{name}: {res['interrupted_epochs']} interrupted epochs, expected {interrupted}")
    check(res["partial_epochs"] == 0, f"{name}: {res['partial_epochs']} partial epochs")
    check(res["dataset_size"] == samples, f"{name}: dataset size {res['dataset_size']}")
    check(res["batch_size"] == batch, f"{name}: batch size {res['batch_size']}")
    tail = samples % batch if drop_last else 0
    per_epoch = samples - tail
    bpe = samples // batch if drop_last else -(-samples // batch)
    check(res["batches_per_epoch"] == bpe,
          f"{name}: the library announced {res['batches_per_epoch']} batches per epoch, "
          f"expected {bpe}")
    check(res["dropped"] == tail * epochs,
          f"{name}: dropped {res['dropped']} samples, expected {tail * epochs}")
    complete = [n for n in res["per_epoch_samples"]]
    cut = list(res["interrupted_epoch_samples"])
    for n in cut:  # an interrupted epoch appears in per_epoch_samples too, in its place
        if n:
            complete.remove(n)
    check(complete == [per_epoch] * epochs,
          f"{name}: per-epoch samples {res['per_epoch_samples']}, expected {epochs} x "
          f"{per_epoch}")
    if not interrupted:
        check(res["samples"] == per_epoch * epochs, f"{name}: {res['samples']} samples")
        check(res["batches"] == bpe * epochs, f"{name}: {res['batches']} batches")
    check(res["views"] + res["gathers"] == res["batches"],
          f"{name}: {res['views']} views + {res['gathers']} gathers != {res['batches']}")


def wait_json(proc, timeout, what=None):
    rc = proc.wait(timeout, what)
    res = proc.json()
    check(rc == 0, f"{proc.name} exit code {rc} ({res.get('error')})")
    return res


def stream_offset(res, first_seq, batches_per_producer_epoch):
    """Where in a producer epoch a consumer's first batch fell (0: at an epoch start)."""
    return (res["first_seq"] - first_seq) % batches_per_producer_epoch


def test_four_batch_sizes(env):
    """Producer batch 64 over 3000 samples (not a multiple of 64); consumers of batch 1, 48, 64
    and 100 (and 128 with drop_last) joining at different moments, three of them while the
    first ones are in the middle of an epoch: every consumer epoch is exact."""
    samples, pbatch, slots = 3000, 64, 8
    stats = env.path("stats.json")
    prod = env.producer("--epochs", "0", stats=stats, samples=samples, batch=pbatch, slots=slots,
                        image=8)
    prod.wait_stderr("serving", 10)
    # (batch, join after ms, delay ms, drop_last). The delays make one group epoch take about
    # a second, so the joiners at 300, 450 and 600 ms land inside the first epoch.
    plan = [(1, 0, 0, False), (64, 0, 20, False), (48, 300, 12, False), (128, 450, 25, True),
            (100, 600, 20, False)]
    cons = []
    for batch, join, delay, drop in plan:
        extra = ["--epochs", "3", "--batch-size", str(batch), "--join-after-ms", str(join),
                 "--delay-ms", str(delay)] + (["--drop-last"] if drop else [])
        cons.append(env.consumer(*extra, samples=samples,
                                 name=f"batch{batch}" + ("-drop-last" if drop else "")))
    results = {}
    for (batch, join, delay, drop), c in zip(plan, cons):
        res = wait_json(c, 25)
        check_exact(res, c.name, 3, samples=samples, batch=batch, drop_last=drop)
        results[c.name] = res
        print(f"{c.name}: first seq {res['first_seq']}, {res['views']} views, "
              f"{res['gathers']} gathers, {res['wall_s']:.2f} s")
    # Zero-copy where a batch lies inside one producer batch, gathers where it cannot.
    check(results["batch1"]["gathers"] == 0, "batch 1: a one-sample batch was gathered")
    check(results["batch64"]["views"] > 0, "batch 64: no zero-copy view")
    check(results["batch48"]["views"] > 0, "batch 48: no zero-copy view")
    check(results["batch100"]["gathers"] > 0, "batch 100: no gather")
    check(results["batch100"]["views"] == 0, "batch 100: a view larger than a producer batch")
    check(results["batch128-drop-last"]["views"] == 0, "batch 128: a view of 128 samples")
    # The late joiners started inside a producer epoch, not at its start (the stream began
    # with the first batch the earliest consumer received).
    per_producer_epoch = -(-samples // pbatch)
    first = min(r["first_seq"] for r in results.values())
    offsets = {n: stream_offset(results[n], first, per_producer_epoch)
               for n in ("batch48", "batch128-drop-last", "batch100")}
    print(f"late joiners' offsets in a producer epoch of {per_producer_epoch} batches: {offsets}")
    check(any(offsets.values()), f"no late joiner started mid-epoch: {offsets}")
    prod.signal(signal.SIGTERM)
    rc = prod.wait(10, "after SIGTERM")
    check(rc == 0, f"producer exit code {rc}")
    st = read_stats(stats)
    check(st["consumers_joined"] == len(plan), f"consumers_joined {st['consumers_joined']}")
    check(st["consumers_lost"] == 0, f"consumers_lost {st['consumers_lost']}")


def test_join_late_exact(env):
    """One consumer from the start and one that joins in the middle of an epoch: both get
    exact epochs. If the joiner happens to land on an epoch boundary, the scenario says
    nothing about mid-epoch joins, so it runs again (at most three times)."""
    per_producer_epoch = SAMPLES // BATCH
    for attempt in range(3):
        prod = env.producer("--epochs", "0", name=f"producer{attempt}")
        prod.wait_stderr("serving", 10)
        first = env.consumer("--epochs", "3", "--delay-ms", "5", name=f"first{attempt}")
        late = env.consumer("--epochs", "3", "--delay-ms", "5", "--join-after-ms", "150",
                            name=f"late{attempt}")
        r_first = wait_json(first, 25)
        r_late = wait_json(late, 25)
        check_exact(r_first, first.name, 3)
        check_exact(r_late, late.name, 3)
        prod.signal(signal.SIGTERM)
        rc = prod.wait(10, "after SIGTERM")
        check(rc == 0, f"producer exit code {rc}")
        offset = stream_offset(r_late, r_first["first_seq"], per_producer_epoch)
        print(f"attempt {attempt}: the late consumer joined at batch {offset} of a producer "
              f"epoch of {per_producer_epoch}")
        if offset != 0:
            return
    raise Failure("the late consumer joined at an epoch boundary three times")


def test_pause_between_epochs(env):
    """B lingers between its epochs; meanwhile A keeps receiving. If B held its slots while
    lingering, A could receive at most `slots` more batches before stalling until B's pause
    ended. Decided by states, not by how fast anything ran: once tsock-stat shows B paused, it
    holds nothing, and A receives more than `slots` further batches while B is still paused
    (B's pause, 5 s, is hundreds of times what A needs for them; were the slots held, A would
    stall for all of it)."""
    slots = 4
    prod = env.producer("--epochs", "0", slots=slots)
    prod.wait_stderr("serving", 10)
    # A: 30 epochs of 64 batches of >= 5 ms each (>= 9.6 s), so it outlasts B's first epoch
    # (B reads at A's pace) plus B's pause.
    a = env.consumer("--epochs", "30", "--delay-ms", "5", "--trace-times", name="A")
    b = env.consumer("--epochs", "2", "--pause-between-epochs-ms", "5000", "--trace-times",
                     name="B", grace=False)

    def entry(snap, name):
        return next((x for x in snap["consumers"] if x["name"] == name), None)

    snap = wait_stat(env, "B paused", lambda sn: (entry(sn, "B") or {}).get("paused"), 60)
    # The batches sent to B and not taken go back once B hears the producer confirm its pause
    # (tsock_consumer_pause in tsock.h): a snapshot between the two may still count them.
    snap = wait_stat(env, "B paused and holding nothing",
                     lambda sn: not (entry(sn, "B") or {}).get("paused")
                     or entry(sn, "B")["held"] == 0, 60)
    check(entry(snap, "B") and entry(snap, "B")["paused"] and entry(snap, "B")["held"] == 0,
          f"B holds slots while paused: {entry(snap, 'B')}")
    a_then = entry(snap, "A")["batches"]
    snap = wait_stat(env, f"A receiving more than {slots} batches during B's pause",
                     lambda sn: not (entry(sn, "B") or {}).get("paused")
                     or entry(sn, "A")["batches"] > a_then + slots, 60)
    check(entry(snap, "B") and entry(snap, "B")["paused"],
          f"B's pause ended before A received {slots + 1} batches: A stalled ({snap})")
    ra = wait_json(a, 60)
    rb = wait_json(b, 60)
    check_exact(ra, "A", 30)
    check_exact(rb, "B", 2)
    # The same from the consumers' own traces: B's pause, from the batch that ended its epoch 0
    # to the first batch of its epoch 1, on the shared monotonic clock.
    pause_from = rb["start_monotonic_s"] + rb["epoch_end_times_s"][0]
    pause_to = rb["start_monotonic_s"] + rb["epoch_start_times_s"][1]
    check(pause_to - pause_from >= 5.0, f"B's pause lasted {pause_to - pause_from:.3f} s")
    times = [ra["start_monotonic_s"] + t for t in ra["batch_times_s"]]
    check(len(times) == ra["batches"], f"A traced {len(times)} of {ra['batches']} batches")
    inside = [t for t in times if pause_from < t < pause_to]
    print(f"B paused {pause_to - pause_from:.3f} s; A received {len(inside)} batches meanwhile, "
          f"{slots} slots")
    check(len(inside) > slots, f"A received only {len(inside)} batches during B's pause")
    prod.signal(signal.SIGTERM)
    rc = prod.wait(10, "after SIGTERM")
    check(rc == 0, f"producer exit code {rc}")


def restart_reconnect(env, restart_after):
    """The producer is killed in the middle of the consumer's second epoch and, `restart_after`
    seconds later, another starts on the same endpoint: with --reconnect-ms the consumer's epoch
    in progress ends early (TSOCK_E_EPOCH_INTERRUPTED), then it finishes its 4 epochs, exact, on
    the new producer. If the kill happens to fall on one of its epoch boundaries nothing is
    interrupted and the scenario runs again (at most three times). Without the option the
    consumer fails: see kill_producer."""
    for attempt in range(3):
        p1 = env.producer("--epochs", "0", name=f"producer1-{attempt}")
        p1.wait_stderr("serving", 10)
        # 64 batches of >= 10 ms: an epoch takes about 0.65 s.
        c = env.consumer("--epochs", "4", "--delay-ms", "10", "--reconnect-ms", "15000",
                         name=f"consumer{attempt}")
        time.sleep(1.0)
        check(c.running(), f"{c.name} ended before the producer was killed: {c.stdout()}")
        killed = time.monotonic()
        p1.p.send_signal(signal.SIGKILL)
        p1.wait(5)
        time.sleep(restart_after)
        p2 = env.producer("--epochs", "0", "--seed", "7", name=f"producer2-{attempt}")
        p2.wait_stderr("serving", 10)
        res = wait_json(c, 25, "after the producer was replaced")
        p2.signal(signal.SIGTERM)
        rc = p2.wait(10, "after SIGTERM")
        check(rc == 0, f"producer2 exit code {rc}")
        rel_kill = killed - res["start_monotonic_s"]
        print(f"attempt {attempt}: killed at {rel_kill:.2f} s; per-epoch samples "
              f"{res['per_epoch_samples']}, interrupted {res['interrupted_epoch_samples']}")
        check(res["interrupted_epochs"] <= 1, f"{res['interrupted_epochs']} interrupted epochs")
        check_exact(res, c.name, 4, interrupted=res["interrupted_epochs"])
        starts = res["epoch_start_times_s"]
        check(any(t < rel_kill for t in starts) and any(t > rel_kill for t in starts),
              f"the consumer's epochs did not straddle the kill: starts {starts}")
        if res["interrupted_epochs"] == 1:
            cut = res["interrupted_epoch_samples"][0]
            check(0 < cut < SAMPLES, f"interrupted epoch had {cut} samples")
            # The interrupted epoch is neither the first nor the last: it is where the kill was.
            # Batches published before the kill may still arrive after it (up to the slot
            # count, each held 10 ms, much later under TSan), so an epoch whose first batch
            # arrived shortly after the kill may be the one cut.
            idx = res["per_epoch_samples"].index(cut)
            in_flight = 0.5
            check(starts[idx] < rel_kill + in_flight and
                  rel_kill < (starts[idx + 1] if idx + 1 < len(starts) else 1e9),
                  f"epoch {idx} ({cut} samples) was interrupted, but the kill was at "
                  f"{rel_kill:.2f} s; epoch starts {starts}")
            return
    raise Failure("the producer's kill fell on the consumer's epoch boundary three times")


def test_producer_restart_reconnect(env):
    """A producer restarted at once, before the consumer noticed the old one's death (the
    heartbeat timeout is 1 s here)."""
    restart_reconnect(env, 0.0)


def test_producer_restart_reconnect_late(env):
    """A producer restarted after the consumer declared the old one lost."""
    restart_reconnect(env, 2.0)


TESTS = {
    "three_consumers": test_three_consumers,
    "host_ring_converted": test_host_ring_converted,
    "kill_consumer": test_kill_consumer,
    "stopped_consumer": test_stopped_consumer,
    "kill_producer": test_kill_producer,
    "sigterm_producer": test_sigterm_producer,
    "tcp_loopback": test_tcp_loopback,
    "bad_options": test_bad_options,
    "stats_json_busy": test_stats_json_busy,
    "latency_reservoir": test_latency_reservoir,
    "garbage_client": test_garbage_client,
    "four_batch_sizes": test_four_batch_sizes,
    "join_late_exact": test_join_late_exact,
    "pause_between_epochs": test_pause_between_epochs,
    "producer_restart_reconnect": test_producer_restart_reconnect,
    "producer_restart_reconnect_late": test_producer_restart_reconnect_late,
    "stat_tool": test_stat_tool,
    "stat_errors": test_stat_errors,
}


if __name__ == "__main__":
    run(__doc__, TESTS, Env, [("producer", True), ("consume", True), ("garbage", False), ("stat", False)])
