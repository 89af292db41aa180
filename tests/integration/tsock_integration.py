#!/usr/bin/env python3
"""Integration tests: real tsock-producer and tsock-consume processes over real sockets.

    tsock_integration.py TEST --producer PATH --consume PATH [--garbage PATH]

TEST is one of the names in TESTS below. Each test uses its own temporary directory (mode
0700) for the ipc endpoint and the statistics files, and kills whatever it started in a
finally block. Standard library only.

The assertions are about behaviour (exit codes, what the consumers verified, what the
producer reports, which files exist); waits are bounded so a hang fails instead of blocking,
but no assertion depends on how fast something ran, except the 5 s bound on a consumer
noticing a dead producer, which is the documented contract.
"""
import argparse
import json
import os
import random
import signal
import socket
import stat
import subprocess
import sys
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


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


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

    def producer(self, *extra, endpoint=None, name="producer", stats=None, hb=True):
        argv = [self.args.producer, "--dataset", "synthetic", "--endpoint", endpoint or self.ipc,
                "--samples", str(SAMPLES), "--image-size", str(IMAGE),
                "--batch-size", str(BATCH), "--slots", "4"]
        if hb:
            argv += ["--heartbeat-ms", "100", "--heartbeat-timeout-ms", "1000"]
        if stats:
            argv += ["--stats-json", stats]
        p = Proc(name, argv + list(extra))
        self.procs.append(p)
        return p

    def consumer(self, *extra, endpoint=None, name="consumer", hb=True):
        argv = [self.args.consume, "--endpoint", endpoint or self.ipc, "--samples", str(SAMPLES),
                "--json", "--quiet", "--name", name]
        if hb:
            argv += ["--heartbeat-ms", "100", "--heartbeat-timeout-ms", "1000"]
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
    check(os.path.exists(path), f"the producer wrote no statistics file {path}")
    with open(path) as f:
        return json.load(f)


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


def test_kill_consumer(env):
    stats = env.path("stats.json")
    # 4 slots, 192 batches: the producer can only finish if the dead consumer's slots come back.
    prod = env.producer("--wait-consumers", "3", "--epochs", "3", stats=stats)
    prod.wait_stderr("serving", 10)
    good = [env.consumer("--epochs", "3", "--delay-ms", str(d), name=f"consumer-delay{d}")
            for d in (0, 1)]
    victim = env.consumer("--epochs", "3", "--delay-ms", "50", name="victim")
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
    frozen = env.consumer("--epochs", "2", "--delay-ms", "20", name="frozen")
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
    # Library default heartbeats on the consumers: the 5 s bound is the default contract.
    cons = [env.consumer("--epochs", "0", "--delay-ms", "1", name=f"consumer{i}", hb=False)
            for i in range(2)]
    time.sleep(1.0)
    for c in cons:
        check(c.running(), f"{c.name} ended before the producer was killed: {c.stdout()}")
    killed = time.monotonic()
    prod.p.send_signal(signal.SIGKILL)
    prod.wait(5)
    for c in cons:
        rc = c.wait(10, "after the producer was killed")
        took = time.monotonic() - killed
        res = c.json()
        print(f"{c.name} exited {took:.2f} s after the producer was killed")
        check(took <= 5.0, f"{c.name} needed {took:.2f} s to notice the dead producer")
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
    cons = [env.consumer("--epochs", "0", "--delay-ms", "1", name=f"consumer{i}")
            for i in range(2)]
    time.sleep(1.0)
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
        rc = c.wait(10, "after the producer stopped")
        took = time.monotonic() - stopped
        res = c.json()
        check(rc == 1, f"{c.name} exit code {rc}, expected 1")
        check(res["error_code"] == TSOCK_E_PRODUCER_STOPPED,
              f"{c.name}: error_code {res['error_code']} ({res['error']}), expected "
              f"TSOCK_E_PRODUCER_STOPPED")
        print(f"{c.name} exited {took:.2f} s after the SIGTERM")
        check(took <= 5.0, f"{c.name} needed {took:.2f} s to notice the stop")
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


TESTS = {
    "three_consumers": test_three_consumers,
    "kill_consumer": test_kill_consumer,
    "stopped_consumer": test_stopped_consumer,
    "kill_producer": test_kill_producer,
    "sigterm_producer": test_sigterm_producer,
    "tcp_loopback": test_tcp_loopback,
    "bad_options": test_bad_options,
    "garbage_client": test_garbage_client,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("test", choices=sorted(TESTS))
    ap.add_argument("--producer", required=True)
    ap.add_argument("--consume", required=True)
    ap.add_argument("--garbage")
    args = ap.parse_args()
    env = Env(args, args.test)
    started = time.monotonic()
    try:
        TESTS[args.test](env)
    except Failure as e:
        print(f"FAIL {args.test}: {e}")
        env.dump()
        return 1
    except Exception:
        env.dump()
        raise
    finally:
        env.cleanup()
    print(f"PASS {args.test} ({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
