"""build_info(), the version's one source, and the library lookup of a source checkout
(issue 22's packaging; the installed package is tested by tests/integration/packaging_test.py).
"""
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def header_version():
    with open(os.path.join(REPO, "include", "tsock", "version.h")) as f:
        return re.search(r'#define TSOCK_VERSION_STRING "([^"]+)"', f.read()).group(1)


def test_build_info_and_version(tsock):
    info = tsock.build_info()
    assert info["version"] == tsock.library_version == header_version()
    assert isinstance(info["cuda"], bool) and isinstance(info["io_uring"], bool)
    assert info["library"] == tsock.library_path
    # A source checkout has no packaged programs; its version is the library's.
    assert info["programs"] is None
    assert tsock.__version__ == header_version()


def test_tsock_library_wins(tsock):
    """TSOCK_LIBRARY is honoured, and wins over a copy next to the package."""
    assert os.path.realpath(tsock.library_path) == os.path.realpath(os.environ["TSOCK_LIBRARY"])


def test_producer_version_matches(tsock, programs):
    out = subprocess.run([programs["tsock-producer"], "--version"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0
    v = header_version()
    assert out.stdout.startswith(f"tsock-producer {v} (libtsock {v}: version={v} cuda=")


def test_launcher_without_programs_says_what_to_do(tsock):
    """A launcher of a package without programs (a source checkout) fails with a message."""
    code = "import tsock._programs as p; p.tsock_producer()"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 127
    assert "pip install ." in r.stderr and "tsock-producer" in r.stderr
