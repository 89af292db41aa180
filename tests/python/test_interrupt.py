"""Ctrl-C reaches a DataLoader that waits: a child process connecting to a producer that never
answers (timeout=None: it would wait forever), and one blocked in next() on a producer that
publishes nothing, both get SIGINT and must end with KeyboardInterrupt, exiting as Python does
for an uncaught one (killed by SIGINT). Each waits on an event first (the child's connection
reaching the endpoint, or its "connected" line), so the signal always meets the wait; the bound
on the exit only turns a hang into a failure."""
import os
import signal
import socket
import subprocess
import sys

import pytest

from tsock_testutil import start_producer

EXIT_BOUND_S = 10  # generous: the library answers a cancel at once, Python within 0.2 s

# A test run started in the background (CI) inherits SIGINT ignored, and so would the child;
# a user's interactive job never has it ignored, so the child restores Python's handler first.
RESTORE_SIGINT = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"

CONNECT_CHILD = RESTORE_SIGINT + """
import sys, tsock
tsock.DataLoader(sys.argv[1], timeout=None)
print("connected: the producer answered?", flush=True)
"""

NEXT_CHILD = RESTORE_SIGINT + """
import sys, tsock
loader = tsock.DataLoader(sys.argv[1], timeout=None)
print("connected", flush=True)
for batch in loader:
    print("got a batch from a producer that publishes nothing", flush=True)
"""


def run_child(procs, code, endpoint):
    p = subprocess.Popen([sys.executable, "-c", code, endpoint], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs.append(p)
    return p


def interrupt_and_check(p):
    p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=EXIT_BOUND_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the child still runs {EXIT_BOUND_S} s after SIGINT")
    assert "KeyboardInterrupt" in err, err
    # An uncaught KeyboardInterrupt ends Python by SIGINT, so its parent sees the usual status.
    assert p.returncode == -signal.SIGINT, (p.returncode, out, err)


def test_ctrl_c_while_connecting(tsock, procs, endpoint):
    # A plain unix socket at the ipc path: the child's ZeroMQ connection arrives (which shows
    # it is inside the start) and never gets a greeting, let alone a WELCOME.
    path = endpoint[len("ipc://"):]
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(path)
        server.listen(4)
        server.settimeout(60)
        p = run_child(procs, CONNECT_CHILD, endpoint)
        try:
            conn, _ = server.accept()
        except socket.timeout:
            p.kill()
            pytest.fail(f"the child never connected: {p.communicate()[1]}")
        try:
            interrupt_and_check(p)
        finally:
            conn.close()
    finally:
        server.close()
        os.unlink(path)


def test_ctrl_c_in_next(tsock, programs, procs, endpoint):
    # The producer waits for two consumers before it publishes anything: with one, next()
    # waits forever.
    start_producer(programs, procs, endpoint, wait_consumers=2)
    p = run_child(procs, NEXT_CHILD, endpoint)
    line = p.stdout.readline()
    assert line.strip() == "connected", (line, p.stderr.read() if p.poll() is not None else "")
    interrupt_and_check(p)
