"""Ctrl-C and SIGTERM end the programs while they wait, with their documented exit status.

  scan_sigint, scan_sigterm
      tsock-producer --dataset list whose list file is a FIFO nobody writes: the index scan
      hangs in open() as it would on a stalled network disk. The test waits until the producer
      is blocked there (its /proc wchan is the FIFO's wait_for_partner), then signals it: the
      producer must say it stopped while indexing and exit 0 (its documented status after a
      SIGINT/SIGTERM, at any time).
  consume_forever_sigint, consume_default_sigterm
      tsock-consume waiting for a producer that never answers, with --connect-timeout-ms -1
      and with the default (10 s): a plain unix socket at the ipc path takes its ZeroMQ
      connection (which shows it is inside tsock_consumer_start) and never speaks. The signal
      must end it with 128 + the signal (130, 143), not a timeout's 1.

Every wait is on an event (the process blocked, the connection made, the exit); the bounds
only turn a hang into a failure."""
import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

EXIT_BOUND_S = 10  # a cancelled wait ends at once; the bound only catches a hang
SKIP = 77


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def wait_for(predicate, what, timeout=60):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def finish(p, what):
    try:
        out, err = p.communicate(timeout=EXIT_BOUND_S)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        fail(f"{what} still ran {EXIT_BOUND_S} s after the signal; stderr:\n{err}")
    return p.returncode, err


def wchan(pid):
    try:
        with open(f"/proc/{pid}/wchan") as f:
            return f.read().strip()
    except OSError:
        return ""


def test_scan(args, tmp, sig):
    fifo = os.path.join(tmp, "train.txt")
    os.mkfifo(fifo)
    p = subprocess.Popen([args.producer, "--dataset", "list", "--list", fifo,
                          "--endpoint", f"ipc://{tmp}/p.sock", "--epochs", "1"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while wchan(p.pid) != "wait_for_partner":
            if p.poll() is not None:
                fail(f"the producer exited ({p.returncode}) before it blocked on the list: "
                     f"{p.stderr.read()}")
            if time.monotonic() > deadline:
                state = wchan(p.pid)
                if state in ("", "0"):
                    print(f"SKIP: this kernel does not show where a process waits "
                          f"(/proc/PID/wchan reads {state!r})", flush=True)
                    sys.exit(SKIP)
                fail(f"the producer never blocked opening the FIFO (wchan {state!r})")
            time.sleep(0.02)
        p.send_signal(sig)
        rc, err = finish(p, "tsock-producer")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    name = signal.Signals(sig).name
    print(err, end="")
    if rc != 0:
        fail(f"tsock-producer exited {rc} after {name} during the index scan, expected 0")
    if f"stopped by {name} while indexing" not in err:
        fail(f"tsock-producer did not say it stopped while indexing:\n{err}")


def test_consume(args, tmp, sig, connect_timeout):
    path = os.path.join(tmp, "p.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(4)
    server.settimeout(60)
    argv = [args.consume, "--endpoint", f"ipc://{path}"]
    if connect_timeout is not None:
        argv += ["--connect-timeout-ms", str(connect_timeout)]
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    conn = None
    try:
        try:
            conn, _ = server.accept()
        except socket.timeout:
            fail("tsock-consume never connected to the endpoint")
        p.send_signal(sig)
        rc, err = finish(p, "tsock-consume")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if conn:
            conn.close()
        server.close()
    print(err, end="")
    if rc != 128 + sig:
        fail(f"tsock-consume exited {rc} after {signal.Signals(sig).name} while waiting for a "
             f"producer, expected {128 + sig}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("test")
    ap.add_argument("--producer", required=True)
    ap.add_argument("--consume", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tsock-int-") as tmp:  # in $TMPDIR
        if args.test == "scan_sigint":
            test_scan(args, tmp, signal.SIGINT)
        elif args.test == "scan_sigterm":
            test_scan(args, tmp, signal.SIGTERM)
        elif args.test == "consume_forever_sigint":
            test_consume(args, tmp, signal.SIGINT, -1)
        elif args.test == "consume_default_sigterm":
            test_consume(args, tmp, signal.SIGTERM, None)
        else:
            fail(f"unknown test {args.test}")
    print("PASS", flush=True)


if __name__ == "__main__":
    main()
