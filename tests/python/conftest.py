"""Fixtures for the Python binding's tests.

Environment:
    TSOCK_LIBRARY   path to libtsock.so (default: <repo>/build/libtsock/libtsock.so)
    TSOCK_BIN_DIR   folder holding tsock-producer and tsock-consume (default: <repo>/build/producer)

The tests import the binding from this checkout (bindings/python), not from site-packages,
so they test the code next to them; set TSOCK_TEST_INSTALLED=1 to test the installed package.
They are skipped only when the library is missing; missing programs are a failure.
"""
import os
import shutil
import sys
import tempfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))

os.environ.setdefault("TSOCK_LIBRARY", os.path.join(REPO, "build", "libtsock", "libtsock.so"))
os.environ.setdefault("TSOCK_BIN_DIR", os.path.join(REPO, "build", "producer"))
LIBRARY = os.environ["TSOCK_LIBRARY"]
BIN_DIR = os.environ["TSOCK_BIN_DIR"]

if os.environ.get("TSOCK_TEST_INSTALLED", "") in ("", "0"):
    sys.path.insert(0, os.path.join(REPO, "bindings", "python"))
# Child processes started by the tests (consumer scripts, the numpy-only run) see the same.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in ([] if os.environ.get("TSOCK_TEST_INSTALLED", "") not in ("", "0")
                else [os.path.join(REPO, "bindings", "python")])
    + [HERE, os.environ.get("PYTHONPATH", "")] if p)


def pytest_report_header(config):
    have = "found" if os.path.exists(LIBRARY) else "MISSING: binding tests are skipped"
    return [f"tsock: TSOCK_LIBRARY={LIBRARY} ({have})", f"tsock: TSOCK_BIN_DIR={BIN_DIR}"]


@pytest.fixture(scope="session")
def tsock():
    """The tsock package; skips the test when libtsock is not built."""
    if not os.path.exists(LIBRARY):
        pytest.skip(f"libtsock not found at TSOCK_LIBRARY={LIBRARY}: build it first "
                    f"(cmake -S . -B build && cmake --build build) or set TSOCK_LIBRARY")
    import tsock as module

    return module


@pytest.fixture(scope="session")
def programs(tsock):
    """Paths of tsock-producer and tsock-consume (a failure when they are not built)."""
    out = {}
    for name in ("tsock-producer", "tsock-consume"):
        path = os.path.join(BIN_DIR, name)
        assert os.access(path, os.X_OK), (
            f"{name} not found in TSOCK_BIN_DIR={BIN_DIR}: build the project or set "
            f"TSOCK_BIN_DIR")
        out[name] = path
    return out


# ipc socket paths hold at most 107 bytes (sun_path); the tests add up to about 40 under a
# short_tmp folder (a child's TMPDIR: multiprocessing's pymp-*/listener-* sockets).
SOCKET_ROOM = 40


@pytest.fixture
def short_tmp():
    """A private temporary folder with a short path, in $TMPDIR (default /tmp), removed with
    everything in it after the test: for ipc sockets, and as TMPDIR of child processes that
    leave files there (torch DataLoader workers stopped by their parent leave pymp-* folders)."""
    d = tempfile.mkdtemp(prefix="tsock-py-")
    if len(d) + SOCKET_ROOM > 107:
        shutil.rmtree(d, ignore_errors=True)
        pytest.fail(f"TMPDIR={tempfile.gettempdir()} is too long for the tests' ipc socket paths "
                    f"(at most 107 bytes): set TMPDIR to a shorter folder, such as /tmp")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def endpoint(short_tmp):
    """A fresh ipc endpoint in a private temporary folder (short path: ipc paths are limited
    to about 100 bytes)."""
    return f"ipc://{short_tmp}/s.sock"


@pytest.fixture
def procs():
    """Collects subprocesses and kills whatever is still running at the end of the test."""
    started = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        try:
            p.wait(timeout=10)
        except Exception:
            pass
        for stream in (p.stdout, p.stderr):
            if stream:
                stream.close()
