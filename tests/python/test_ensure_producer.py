"""tsock.ensure_producer: local ranks racing to start one producer per endpoint."""
import json
import os
import signal

import pytest

from tsock_testutil import start_python, wait_until

RANKS = 4
SAMPLES = 64

# Producers the ranks started: detached from them, so the test stops them itself, also when
# it fails.
_started = []


@pytest.fixture(autouse=True)
def stop_started_producers():
    yield
    while _started:
        pid = _started.pop()
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_ranks(procs, endpoint, program, tmp_path, ranks=RANKS):
    go = str(tmp_path / "go")
    here = os.path.dirname(os.path.abspath(__file__))
    children = [start_python(procs, [os.path.join(here, "ensure_child.py"), endpoint, program,
                                     go, str(SAMPLES)]) for _ in range(ranks)]
    open(go, "w").close()
    results = []
    for c in children:
        out, err = c.communicate(timeout=120)
        assert c.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    _started.extend({r["pid"] for r in results if r["pid"]})
    for r in results:
        assert r["error"] is None, results
        assert r["samples"] == SAMPLES and r["distinct"] == SAMPLES, r
    return results


def stop(pid):
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    wait_until(lambda: not os.path.exists(f"/proc/{pid}") or
               open(f"/proc/{pid}/stat").read().split()[2] == "Z", 30, "the producer to stop")


def test_one_producer_for_racing_ranks(tsock, programs, procs, endpoint, tmp_path):
    results = run_ranks(procs, endpoint, programs["tsock-producer"], tmp_path)
    started = [r for r in results if r["started"]]
    assert len(started) == 1, results  # exactly one rank started it ...
    assert len({r["pid"] for r in results}) == 1, results  # ... and every rank uses that one
    pid = results[0]["pid"]
    assert tsock.query_stats(endpoint)["producer"]["pid"] == pid
    # A later caller attaches to the running producer.
    h = tsock.ensure_producer("synthetic", endpoint=endpoint, program=programs["tsock-producer"])
    assert not h.started and h.pid == pid and h.stop() is None
    stop(pid)


def test_dead_producer_is_replaced(tsock, programs, procs, endpoint, tmp_path):
    first = run_ranks(procs, endpoint, programs["tsock-producer"], tmp_path, ranks=2)
    old = first[0]["pid"]
    os.kill(old, signal.SIGKILL)  # leaves a stale socket file and shared memory behind
    wait_until(lambda: not os.path.exists(f"/proc/{old}") or
               open(f"/proc/{old}/stat").read().split()[2] == "Z", 30, "the producer to die")
    os.unlink(str(tmp_path / "go"))
    second = run_ranks(procs, endpoint, programs["tsock-producer"], tmp_path, ranks=2)
    assert [r["started"] for r in second].count(True) == 1, second
    assert second[0]["pid"] == second[1]["pid"] != old
    stop(second[0]["pid"])


def test_errors(tsock, programs, endpoint, tmp_path):
    with pytest.raises(FileNotFoundError, match="not an executable"):
        tsock.ensure_producer("synthetic", endpoint=endpoint, program=str(tmp_path / "nope"))
    # A producer that refuses its options: the error carries the end of its log.
    with pytest.raises(RuntimeError, match="--samples"):
        tsock.ensure_producer("synthetic", endpoint=endpoint, program=programs["tsock-producer"],
                              samples=0)
    with pytest.raises(RuntimeError, match="--dataset"):
        tsock.ensure_producer("nonsense", endpoint=endpoint, program=programs["tsock-producer"])
