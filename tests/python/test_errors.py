"""Library discovery, the version check, and errors carrying their codes."""
import errno
import os
import pickle
import re
import shutil
import subprocess
import sys

import pytest

from conftest import LIBRARY, REPO


def _header_version():
    text = open(os.path.join(REPO, "include", "tsock", "version.h")).read()
    return tuple(int(re.search(rf"#define TSOCK_VERSION_{k}\s+(\d+)", text).group(1))
                 for k in ("MAJOR", "MINOR", "PATCH"))


def test_library_version_is_checked_at_import(tsock):
    assert tsock.library_version_info == _header_version()
    assert tsock.library_version == "%d.%d.%d" % _header_version()
    assert os.path.samefile(tsock.library_path, LIBRARY)


@pytest.mark.parametrize("major,minor", [(1, 0), (0, 99)])
def test_version_mismatch_message_names_both_versions(tsock, monkeypatch, major, minor):
    monkeypatch.setattr(tsock._lib, "EXPECTED_MAJOR", major)
    monkeypatch.setattr(tsock._lib, "EXPECTED_MINOR", minor)
    with pytest.raises(tsock.VersionMismatch) as info:
        tsock._lib._check_version()
    text = str(info.value)
    assert tsock.library_version in text and f"{major}.{minor}" in text
    assert isinstance(info.value, ImportError)


def _import_in_child(env, code="import tsock; print(tsock.library_path)"):
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60)


def test_bad_tsock_library_path_is_a_clear_import_error(tsock, tmp_path):
    missing = str(tmp_path / "nope" / "libtsock.so")
    r = _import_in_child(dict(os.environ, TSOCK_LIBRARY=missing))
    assert r.returncode != 0
    assert "LibraryNotFound" in r.stderr and missing in r.stderr and "TSOCK_LIBRARY" in r.stderr


def test_library_next_to_the_package_is_found(tsock, tmp_path):
    pkg = tmp_path / "site" / "tsock"
    shutil.copytree(os.path.dirname(tsock.__file__), pkg,
                    ignore=shutil.ignore_patterns("__pycache__", "libtsock.so*"))
    shutil.copy(LIBRARY, pkg / "libtsock.so.0")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"))
    env.pop("TSOCK_LIBRARY")
    r = _import_in_child(env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(pkg / "libtsock.so.0")


def test_strerror_and_error_classes(tsock):
    assert "end" in tsock.strerror(tsock.E_END).lower()
    assert tsock.strerror(-errno.ETIMEDOUT)
    cases = {
        tsock.E_END: tsock.EndOfStream,
        tsock.E_PRODUCER_LOST: tsock.ProducerLost,
        tsock.E_PRODUCER_STOPPED: tsock.ProducerStopped,
        -errno.ETIMEDOUT: tsock.Timeout,
        tsock.E_PROTOCOL: tsock.TsockError,
        -errno.EINVAL: tsock.TsockError,
        tsock.E_GROUP_INCOMPLETE: tsock.GroupIncomplete,
        tsock.E_GROUP_MISMATCH: tsock.GroupMismatch,
        tsock.E_GROUP_LOST: tsock.GroupLost,
    }
    for code, cls in cases.items():
        e = tsock._lib.error(code, "tsock_consumer_next")
        assert type(e) is cls and isinstance(e, tsock.TsockError)
        assert e.code == code and e.message == tsock.strerror(code)
        assert e.function == "tsock_consumer_next" and str(code) in str(e)
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is cls and back.code == code and back.message == e.message
    assert isinstance(tsock._lib.error(-errno.ETIMEDOUT), TimeoutError)
    assert isinstance(tsock._lib.error(tsock.E_PRODUCER_LOST), ConnectionError)
    assert tsock._lib.error(-errno.EINVAL).name == "EINVAL"
    assert tsock._lib.error(-errno.EINVAL).errno == errno.EINVAL
    assert tsock._lib.error(tsock.E_STATE).errno is None
    # The group codes follow TSOCK_E_BAD_STATE, each with its own text.
    assert (tsock.E_GROUP_INCOMPLETE, tsock.E_GROUP_MISMATCH, tsock.E_GROUP_LOST) == (
        -10020, -10021, -10022)
    assert "group incomplete" in tsock.strerror(tsock.E_GROUP_INCOMPLETE)
    assert "group mismatch" in tsock.strerror(tsock.E_GROUP_MISMATCH)
    assert "group lost" in tsock.strerror(tsock.E_GROUP_LOST)
    assert tsock.strerror(-10023) == "unknown error code"
    assert tsock._lib.error(tsock.E_GROUP_LOST).name == "TSOCK_E_GROUP_LOST"
    assert isinstance(tsock._lib.error(tsock.E_GROUP_MISMATCH), ValueError)


def test_invalid_arguments_raise_with_codes(tsock, endpoint):
    with pytest.raises(ValueError):
        tsock.DataLoader(endpoint, timeout=-1)
    with pytest.raises(ValueError, match="2 or more"):
        tsock.Producer(endpoint, batch_size=2, slots=1)
    # A name longer than TSOCK_MAX_NAME is refused by the library itself, with its code.
    with pytest.raises(tsock.TsockError) as info:
        tsock.Consumer(endpoint, name="x" * 200, timeout=0.1)
    assert info.value.code == -errno.EINVAL


def test_log_callback_receives_library_lines(tsock, endpoint):
    import numpy as np

    lines = []
    tsock.set_log(lambda level, message: lines.append((level, message)), tsock.LOG_DEBUG)
    try:
        with tsock.Producer(endpoint, batch_size=2) as producer:
            producer.start((np.zeros((2, 1), np.uint8),))
            with tsock.Consumer(endpoint, timeout=10):
                producer.wait_consumers(1, timeout=10)
    finally:
        tsock.set_log(None)
    assert lines, "no log line arrived"
    assert all(isinstance(m, str) and 0 <= lvl <= tsock.LOG_DEBUG for lvl, m in lines)
    count = len(lines)
    with tsock.Producer(endpoint, batch_size=2) as producer:
        producer.start((np.zeros((2, 1), np.uint8),))
    assert len(lines) == count  # discarded again after set_log(None)


def test_warnings_and_errors_are_kept_for_exceptions(tsock, programs, procs, endpoint):
    # Without any set_log callback the binding keeps the library's last warnings and errors,
    # so that an exception can carry the sentence that explains it (a group's missing ranks).
    import signal

    from tsock_testutil import start_producer

    tsock.set_log(None)
    prod = start_producer(programs, procs, endpoint, batch_size=4, samples=64, epochs=0)
    consumer = tsock.Consumer(endpoint, timeout=20, heartbeat=(0.05, 0.5))
    mark = tsock._lib.log_mark()
    prod.send_signal(signal.SIGKILL)
    with pytest.raises(tsock.ProducerLost):
        while True:
            consumer.next(timeout=30).release()
    consumer.close()
    line = tsock._lib.recent_log("no word from the producer", after=mark)
    assert line is not None and "ms" in line, list(tsock._lib._recent)
    assert tsock._lib.recent_log("no word from the producer",
                                 after=tsock._lib.log_mark()) is None
