"""Starting a node's producer from the job itself: every local rank calls
:func:`ensure_producer`; the first one starts ``tsock-producer``, the others attach to it.

How the race is settled: the ranks take an exclusive ``flock`` on a lock file beside the
endpoint's socket file, one at a time. Whoever holds it asks the endpoint for its statistics
(the same liveness probe ``tsock-stat`` makes); only when nothing answers does it start a
producer, and it keeps the lock until that producer answers. The kernel drops a lock whose
holder died, so a rank killed mid-start never blocks the others, and a producer that died is
replaced by the next call. See docs/distributed.md.
"""
import fcntl
import os
import shutil
import subprocess
import time

from . import _programs
from . import errors
from ._lib import default_endpoint
from .stats import query_stats


class ProducerHandle:
    """What :func:`ensure_producer` found or started.

    ``endpoint``: where the producer serves; ``pid``: its process id; ``started``: True in the
    one process that started it (the others attached); ``log_path``: its output, when this
    process started it."""

    def __init__(self, endpoint, pid, started, process=None, log_path=None):
        self.endpoint = endpoint
        self.pid = pid
        self.started = started
        self.log_path = log_path
        self._process = process

    def stop(self, timeout=30.0):
        """Stops the producer this process started (SIGTERM: consumers are told, shared memory
        is removed) and waits for it; returns its exit status. Does nothing in a process that
        only attached (returns None): the producer belongs to the rank that started it."""
        if self._process is None:
            return None
        if self._process.poll() is None:
            self._process.terminate()
        return self._process.wait(timeout=timeout)

    def __repr__(self):
        how = "started" if self.started else "attached"
        return f"ProducerHandle({self.endpoint!r}, pid={self.pid}, {how})"


def _flag_args(options):
    """{"batch_size": 64, "no_flip": True} -> ["--batch-size", "64", "--no-flip"]."""
    argv = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif isinstance(value, (tuple, list)):  # color_jitter=(0.4, 0.4, 0.4, 0) -> 0.4,...
            argv += [flag, ",".join(str(v) for v in value)]
        else:
            argv += [flag, str(value)]
    return argv


def _find_program(program):
    if program is not None:
        if not (os.path.isfile(program) and os.access(program, os.X_OK)):
            raise FileNotFoundError(f"tsock-producer program {program!r} is not an executable "
                                    f"file")
        return program
    for env in ("TSOCK_PRODUCER",):
        if os.environ.get(env):
            return _find_program(os.environ[env])
    bin_dir = os.environ.get("TSOCK_BIN_DIR")
    if bin_dir and os.access(os.path.join(bin_dir, "tsock-producer"), os.X_OK):
        return os.path.join(bin_dir, "tsock-producer")
    # The program installed with this package (pip install .), which matches its library.
    found = _programs.packaged("tsock-producer")
    if found is not None:
        return found
    found = shutil.which("tsock-producer")
    if found is None:
        raise FileNotFoundError("tsock-producer not found: install it on PATH, or pass "
                                "program=, or set TSOCK_PRODUCER or TSOCK_BIN_DIR")
    return found


def _lock_path(endpoint):
    """A lock file every local rank derives from the endpoint: beside an ipc socket file, or
    in the per-user runtime folder for a tcp endpoint."""
    if endpoint.startswith("ipc://"):
        path = endpoint[len("ipc://"):]
        folder = os.path.dirname(path) or "."
        os.makedirs(folder, mode=0o700, exist_ok=True)
        return path + ".lock"
    folder = os.path.dirname(default_endpoint()[len("ipc://"):])
    os.makedirs(folder, mode=0o700, exist_ok=True)
    safe = "".join(c if c.isalnum() else "_" for c in endpoint)
    return os.path.join(folder, safe + ".lock")


def _answering_pid(endpoint, probe_timeout):
    """The pid of the producer that answers at `endpoint`, or None when none answers."""
    try:
        return query_stats(endpoint, timeout=probe_timeout)["producer"]["pid"]
    except errors.TsockError:
        return None


def _lock(fd, timeout):
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if deadline is not None and time.monotonic() > deadline:
                raise errors.Timeout(-110, "waiting for another local rank to start the "
                                     "producer")
            time.sleep(0.05)


def _tail(path, lines=20):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def ensure_producer(dataset, root=None, endpoint=None, program=None, timeout=120.0,
                    probe_timeout=1.0, **options):
    """Makes sure a producer serves `endpoint` (None: the default endpoint) and returns a
    :class:`ProducerHandle`.

    If one answers there, this process attaches (``started`` False). Otherwise it starts
    ``tsock-producer --dataset DATASET [--root ROOT] --endpoint ENDPOINT`` plus one flag per
    keyword in `options` (``batch_size=64`` -> ``--batch-size 64``, ``no_flip=True`` ->
    ``--no-flip``), detached in its own session so that it outlives the rank, its output in
    ``<socket>.log``, and waits until it answers. Safe to call from every local rank at once:
    exactly one starts the producer. The program is `program`, else ``$TSOCK_PRODUCER``, else
    ``$TSOCK_BIN_DIR/tsock-producer``, else the one installed with this package (``pip
    install .``), else ``tsock-producer`` on PATH. The producer reads
    ``--nodes``/``--node-rank`` from Slurm's or torchrun's environment when they are not given,
    and then serves only this node's share of the dataset; ``nodes=1`` serves all of it.

    Raises FileNotFoundError when there is no program, :class:`tsock.Timeout` when no producer
    answered within `timeout` seconds, and RuntimeError with the end of its log when the
    producer it started exited (a bad option, an unreadable dataset, ...).
    """
    if endpoint is None:
        endpoint = default_endpoint()
    pid = _answering_pid(endpoint, probe_timeout)
    if pid is not None:
        return ProducerHandle(endpoint, pid, False)
    argv = [_find_program(program), "--dataset", str(dataset), "--endpoint", endpoint]
    if root is not None:
        argv += ["--root", str(root)]
    argv += _flag_args(options)
    deadline = time.monotonic() + timeout
    with open(_lock_path(endpoint), "a") as lock:
        _lock(lock.fileno(), timeout)
        try:
            # Someone may have started it while this process waited for the lock.
            pid = _answering_pid(endpoint, probe_timeout)
            if pid is not None:
                return ProducerHandle(endpoint, pid, False)
            return _start(argv, endpoint, deadline, probe_timeout)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _start(argv, endpoint, deadline, probe_timeout):
    log_path = _lock_path(endpoint)[: -len(".lock")] + ".log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv + ["--quiet"], stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    while True:
        pid = _answering_pid(endpoint, probe_timeout)
        if pid is not None:
            return ProducerHandle(endpoint, pid, True, proc, log_path)
        if proc.poll() is not None:
            raise RuntimeError(f"tsock-producer exited with status {proc.returncode} before "
                               f"serving {endpoint}:\n{_tail(log_path)}")
        if time.monotonic() > deadline:
            proc.terminate()
            raise errors.Timeout(-110, f"tsock-producer did not answer at {endpoint}")
        time.sleep(0.05)
