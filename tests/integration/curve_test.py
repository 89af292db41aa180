#!/usr/bin/env python3
"""Who may connect: CURVE authentication over tcp with real keys (docs/security.md).

    curve_test.py TEST --producer PATH --consume PATH --stat PATH --keygen PATH --garbage PATH

Every test writes its key pairs with tsock-keygen into its own temporary directory (mode 0700)
and drives the real programs over tcp://127.0.0.1. Waits are bounded; no assertion depends on
how fast something ran. Standard library only.
"""
import os
import signal
import stat
import subprocess
import time

from itest import check, run  # the shared harness, beside this file
from tsock_integration import (BATCHES_PER_EPOCH, Env, Proc, check_exact, free_tcp_port,
                               raw_tcp_garbage, read_stats)
import random


def producer(env, *argv, **kw):
    """A producer with the library's default heartbeat (3 s timeout): these tests are about who
    may connect, and sanitizer builds on a loaded machine must not turn them into liveness
    tests."""
    return env.producer(*argv, hb=False, **kw)


def consumer(env, *argv, **kw):
    return env.consumer(*argv, hb=False, **kw)


def keygen(env, name):
    """Writes NAME.key / NAME.key_secret in the test directory; returns (secret, public)."""
    r = subprocess.run([env.args.keygen, env.path(name)], capture_output=True, text=True,
                       timeout=20)
    check(r.returncode == 0, f"tsock-keygen {name}: exit code {r.returncode}: {r.stderr!r}")
    return env.path(name + ".key_secret"), env.path(name + ".key")


def authorized_dir(env, *public_keys):
    d = env.path("authorized")
    os.mkdir(d, 0o700)
    for k in public_keys:
        with open(k) as src, open(os.path.join(d, os.path.basename(k)), "w") as dst:
            dst.write(src.read())
    return d


def curve_args(secret, peer, server=False):
    return ["--curve-secret-key", secret,
            "--curve-authorized-keys" if server else "--curve-server-key", peer]


def run_stat(env, *args, timeout=30):
    return subprocess.run([env.args.stat] + list(args), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


TSOCK_E_AUTH = -10018


ETIMEDOUT = -110


def check_turned_away(proc, what, may_time_out=False):
    """A client the producer did not accept: its start fails with TSOCK_E_AUTH (it saw the
    handshake refused), with no batch. A client without keys sees a mechanism mismatch, which
    ZeroMQ reports through an event that a heavily loaded machine can deliver too late: for it
    a timed-out start, having received nothing, is the same verdict."""
    rc = proc.wait(30, what)
    check(rc == 1, f"{what}: exit code {rc}, expected 1")
    res = proc.json()
    check(res["batches"] == 0 and res["samples"] == 0, f"{what}: received {res['batches']} "
          f"batches")
    if may_time_out and res["error_code"] == ETIMEDOUT:
        return
    check(res["error_code"] == TSOCK_E_AUTH and "authentication failed" in res["error"],
          f"{what}: error {res['error_code']} {res['error']!r}")


# ---- tests ------------------------------------------------------------------------------------

def test_exact_with_intruders(env):
    """A keyed consumer gets exact epochs while clients with a wrong key, a wrong server key,
    no key at all, ZeroMQ garbage and raw TCP garbage try the same endpoint; none of them gets
    a batch or counts as a consumer, and the producer logs the refused key."""
    srv_secret, srv_public = keygen(env, "server")
    cli_secret, cli_public = keygen(env, "client")
    bad_secret, bad_public = keygen(env, "intruder")
    port = free_tcp_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    stats = env.path("stats.json")
    epochs = 3
    prod = producer(env, "--wait-consumers", "1", "--epochs", str(epochs),
                        *curve_args(srv_secret, authorized_dir(env, cli_public), server=True),
                        endpoint=endpoint, stats=stats)
    prod.wait_stderr("serving", 10)
    intruders = [
        ("wrong client key", curve_args(bad_secret, srv_public)),
        ("wrong server key", curve_args(cli_secret, bad_public)),
        ("no key", []),
    ]
    procs = [consumer(env, "--epochs", "1", "--connect-timeout-ms", "20000", *argv,
                          endpoint=endpoint, name=f"intruder{i}")
             for i, (_, argv) in enumerate(intruders)]
    g = Proc("garbage", [env.args.garbage, endpoint, "300", "3"])  # a DEALER without keys
    env.procs.append(g)
    raw_tcp_garbage(port, 6, random.Random(3))
    for argv in ([], curve_args(bad_secret, srv_public), curve_args(cli_secret, bad_public)):
        r = run_stat(env, endpoint, "--json", "--timeout-ms", "20000", *argv)
        check(r.returncode == 1 and "authentication failed" in r.stderr and not r.stdout,
              f"tsock-stat {argv}: exit code {r.returncode}, {r.stderr!r}")
    # The keyed consumer joins only now: with it the producer serves its 3 epochs in about a
    # second and exits, and a tsock-stat still waiting for a core on a loaded machine would then
    # find no producer at all instead of being refused (seen under load).
    good = consumer(env, "--epochs", str(epochs), "--delay-ms", "5",
                        *curve_args(cli_secret, srv_public), endpoint=endpoint, name="keyed")
    for p, (what, _) in zip(procs, intruders):
        check_turned_away(p, what, may_time_out=what == "no key")
    # The garbage client never completes a handshake, so it still waits to hand its messages
    # over: stop it; bad_messages below shows none of them reached the producer's protocol.
    g.kill()
    rc = good.wait(60)
    check(rc == 0, f"keyed consumer exit code {rc}")
    check_exact(good.json(), "keyed", epochs)
    check(prod.wait(20) == 0, "producer exit code")
    st = read_stats(stats)
    check(st["consumers_joined"] == 1, f"consumers_joined = {st['consumers_joined']}")
    check(st["bad_messages"] == 0, f"bad_messages = {st['bad_messages']}: unauthenticated "
          f"bytes reached the protocol")
    check(st["batches"] == BATCHES_PER_EPOCH * epochs, f"batches {st['batches']}")
    with open(bad_public) as f:
        bad_key = f.read().strip()
    check(f"client key {bad_key} is not authorized" in prod.stderr(),
          f"the producer did not log the refused key: {prod.stderr()!r}")


def test_stat_with_keys(env):
    """tsock-stat with the right keys reads a keyed producer's statistics."""
    srv_secret, srv_public = keygen(env, "server")
    cli_secret, cli_public = keygen(env, "client")
    keys = env.path("authorized_keys")
    with open(cli_public) as src, open(keys, "w") as dst:
        dst.write("# the monitoring client\n\n" + src.read().strip() + " monitor@host\n")
    endpoint = f"tcp://127.0.0.1:{free_tcp_port()}"
    prod = producer(env, "--epochs", "0", *curve_args(srv_secret, keys, server=True),
                        endpoint=endpoint)
    prod.wait_stderr("serving", 10)
    r = run_stat(env, endpoint, "--json", *curve_args(cli_secret, srv_public))
    check(r.returncode == 0, f"tsock-stat with keys: exit code {r.returncode}: {r.stderr!r}")
    check(f'"endpoint":"{endpoint}"' in r.stdout.replace(" ", ""), f"snapshot {r.stdout!r}")
    # The same client key also works as a consumer key: one key per client, whatever it does.
    c = consumer(env, "--epochs", "1", *curve_args(cli_secret, srv_public), endpoint=endpoint,
                     name="also")
    check(c.wait(40) == 0, f"consumer exit code {c.p.poll()}")
    check_exact(c.json(), "also", 1)
    prod.signal(signal.SIGTERM)
    check(prod.wait(10, "after SIGTERM") == 0, "producer exit code after SIGTERM")


def test_network_refusal(env):
    """Without keys, an endpoint reachable from other hosts is refused unless the opt-out is
    given; loopback stays allowed; with keys any address is served."""
    port = free_tcp_port()
    for ep in (f"tcp://0.0.0.0:{port}", f"tcp://*:{port}", f"tcp://[::]:{port}",
               f"tcp://192.0.2.10:{port}", f"tcp://eth0:{port}"):
        p = producer(env, "--epochs", "1", endpoint=ep, name=f"refused {ep}")
        rc = p.wait(20)
        check(rc == 1, f"{ep}: exit code {rc}, expected 1")
        err = p.stderr()
        check("refusing to serve" in err and ep in err and "--insecure-open-to-network" in err,
              f"{ep}: message {err!r}")
    # Issue 18: the source-address form (libzmq binds the part after ';') and an abstract ipc
    # name (no file permissions) are refused too, each message saying why and what to do.
    for ep, why, todo in [
            (f"tcp://[127.0.0.1]:1;0.0.0.0:{port}", "source address", "tcp://127.0.0.1:PORT"),
            (f"tcp://127.0.0.1:1;[::]:{port}", "source address", "tcp://127.0.0.1:PORT"),
            (f"ipc://@tsock-test-{os.getpid()}", "abstract socket", "ipc:///run/user/")]:
        p = producer(env, "--epochs", "1", endpoint=ep, name=f"refused {ep}")
        rc = p.wait(20)
        err = p.stderr()
        check(rc == 1, f"{ep}: exit code {rc}, expected 1: {err!r}")
        check("refusing to serve" in err and why in err and todo in err
              and "--insecure-open-to-network" in err, f"{ep}: message {err!r}")
    # The opt-out names the risk and serves; a consumer on loopback gets exact epochs.
    stats = env.path("stats.json")
    p = producer(env, "--wait-consumers", "1", "--epochs", "1", "--insecure-open-to-network",
                     endpoint=f"tcp://0.0.0.0:{port}", stats=stats, name="opted out")
    p.wait_stderr("serving", 10)
    check("without authentication" in p.stderr(), f"no warning: {p.stderr()!r}")
    c = consumer(env, "--epochs", "1", endpoint=f"tcp://127.0.0.1:{port}", name="open")
    check(c.wait(40) == 0, "consumer of the opted-out producer")
    check_exact(c.json(), "open", 1)
    check(p.wait(20) == 0, "opted-out producer exit code")
    # With keys the wildcard address is fine.
    srv_secret, srv_public = keygen(env, "server")
    cli_secret, cli_public = keygen(env, "client")
    port = free_tcp_port()
    p = producer(env, "--wait-consumers", "1", "--epochs", "1",
                     *curve_args(srv_secret, authorized_dir(env, cli_public), server=True),
                     endpoint=f"tcp://0.0.0.0:{port}", name="keyed wildcard")
    p.wait_stderr("serving", 10)
    c = consumer(env, "--epochs", "1", *curve_args(cli_secret, srv_public),
                     endpoint=f"tcp://127.0.0.1:{port}", name="keyed")
    check(c.wait(40) == 0, "keyed consumer of the wildcard producer")
    check_exact(c.json(), "keyed", 1)
    check(p.wait(20) == 0, "keyed wildcard producer exit code")
    # The opt-out and keys together contradict each other: bad usage.
    p = producer(env, "--insecure-open-to-network",
                     *curve_args(srv_secret, env.path("authorized"), server=True),
                     endpoint=f"tcp://0.0.0.0:{port}", name="both")
    check(p.wait(20) == 2 and "--insecure-open-to-network" in p.stderr(), "opt-out with keys")


def write(path, data, mode=0o600):
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)
    return path


def test_bad_keys(env):
    """Bad key files end every program at once with exit 1 and a message that names the file
    and the fault; half a key pair on the command line is bad usage (exit 2)."""
    srv_secret, srv_public = keygen(env, "server")
    cli_secret, cli_public = keygen(env, "client")
    good_dir = authorized_dir(env, cli_public)
    with open(cli_secret, "rb") as f:
        secret_bytes = f.read()
    missing = env.path("missing.key_secret")
    loose = write(env.path("loose.key_secret"), secret_bytes, 0o644)
    short = write(env.path("short.key_secret"), secret_bytes[:30])
    long_ = write(env.path("long.key_secret"), secret_bytes.strip() + b"AAAA\n")
    not_z85 = write(env.path("notz85.key_secret"), b"~" * 40 + b"\n")
    empty_keys = write(env.path("empty_keys"), b"# nothing here\n", 0o644)
    open_keys = write(env.path("open_keys"), open(cli_public, "rb").read(), 0o666)
    bad_line = write(env.path("bad_line_keys"), b"not-a-key comment\n", 0o644)
    empty_dir = env.path("empty_dir")
    os.mkdir(empty_dir, 0o700)
    # Issue 18: a *.key file others may change; a FIFO (open() waited for a writer forever).
    open_key_dir = env.path("open_key_dir")
    os.mkdir(open_key_dir, 0o700)
    open_key = write(os.path.join(open_key_dir, "client.key"), open(cli_public, "rb").read(),
                     0o666)
    fifo_secret = env.path("fifo.key_secret")
    os.mkfifo(fifo_secret, 0o600)
    fifo_dir = env.path("fifo_dir")
    os.mkdir(fifo_dir, 0o700)
    fifo_key = os.path.join(fifo_dir, "client.key")
    os.mkfifo(fifo_key, 0o644)
    secret_cases = [(missing, "No such file"), (loose, "mode 0644"), (short, "found 30 bytes"),
                    (long_, "found 45 bytes"), (not_z85, "not a Z85 key"),
                    (fifo_secret, "not a regular file")]
    endpoint = f"tcp://127.0.0.1:{free_tcp_port()}"

    def expect(argv_proc, path, reason, code=1):
        rc = argv_proc.wait(20)
        err = argv_proc.stderr()
        check(rc == code, f"{argv_proc.name}: exit code {rc}, expected {code}: {err!r}")
        check(path in err and reason in err, f"{argv_proc.name}: message lacks {path!r} and "
              f"{reason!r}: {err!r}")

    for path, reason in secret_cases:
        expect(producer(env, *curve_args(path, good_dir, server=True), endpoint=endpoint,
                            name=f"producer {os.path.basename(path)}"), path, reason)
        expect(consumer(env, *curve_args(path, srv_public), endpoint=endpoint,
                            name=f"consumer {os.path.basename(path)}"), path, reason)
        r = run_stat(env, endpoint, *curve_args(path, srv_public))
        check(r.returncode == 1 and path in r.stderr and reason in r.stderr,
              f"tsock-stat {path}: exit code {r.returncode}: {r.stderr!r}")
    # A public key file with the same faults (mode aside: public keys may be read by anyone).
    expect(consumer(env, *curve_args(cli_secret, short), endpoint=endpoint, name="server key"),
           short, "found 30 bytes")
    for keys, reason in [(empty_keys, "no key in it"), (open_keys, "mode 0666"),
                         (bad_line, "line 1"), (empty_dir, "no key in it"),
                         (missing, "No such file"), (open_key, "chmod go-w"),
                         (fifo_key, "not a regular file")]:
        expect(producer(env, *curve_args(srv_secret, keys, server=True), endpoint=endpoint,
                            name=f"authorized {os.path.basename(keys)}"), keys, reason)
    # Half a key pair: bad usage, naming the option.
    for argv, needle in [(["--curve-secret-key", srv_secret], "--curve-authorized-keys"),
                         (["--curve-authorized-keys", good_dir], "--curve-secret-key")]:
        p = producer(env, *argv, endpoint=endpoint, name="half producer")
        check(p.wait(20) == 2 and needle in p.stderr(), f"half key pair: {p.stderr()!r}")
    p = consumer(env, "--curve-secret-key", cli_secret, endpoint=endpoint, name="half consumer")
    check(p.wait(20) == 2 and "--curve-server-key" in p.stderr(), f"half: {p.stderr()!r}")
    r = run_stat(env, endpoint, "--curve-server-key", srv_public)
    check(r.returncode == 2 and "--curve-secret-key" in r.stderr, f"stat half: {r.stderr!r}")


def test_keygen(env):
    """tsock-keygen writes a 0600 secret and a 0644 public key, 40 Z85 characters and a newline
    each, never replaces an existing key, and rejects bad usage."""
    secret, public = keygen(env, "k")
    for path, mode in [(secret, 0o600), (public, 0o644)]:
        st = os.stat(path)
        check(stat.S_IMODE(st.st_mode) == mode, f"{path}: mode {stat.S_IMODE(st.st_mode):o}")
        with open(path, "rb") as f:
            data = f.read()
        check(len(data) == 41 and data.endswith(b"\n"), f"{path}: {data!r}")
    with open(secret, "rb") as f:
        before = f.read()
    r = subprocess.run([env.args.keygen, env.path("k")], capture_output=True, text=True)
    check(r.returncode == 1 and "already exists" in r.stderr, f"overwrite: {r.stderr!r}")
    with open(secret, "rb") as f:
        check(f.read() == before, "tsock-keygen replaced an existing secret key")
    a, _ = keygen(env, "other")
    with open(a, "rb") as f:
        check(f.read() != before, "two key pairs are the same")
    for argv in ([], ["a", "b"], ["--frob"]):
        r = subprocess.run([env.args.keygen] + argv, capture_output=True, text=True)
        check(r.returncode == 2, f"tsock-keygen {argv}: exit code {r.returncode}")


TESTS = {
    "curve_exact_with_intruders": test_exact_with_intruders,
    "curve_stat_with_keys": test_stat_with_keys,
    "curve_network_refusal": test_network_refusal,
    "curve_bad_keys": test_bad_keys,
    "curve_keygen": test_keygen,
}

if __name__ == "__main__":
    run(__doc__, TESTS, Env, [("producer", True), ("consume", True), ("stat", True),
                              ("keygen", True), ("garbage", True)])
