"""GPU path end to end on the simulated device (TSOCK_CUDA_SIM=1): tsock-producer --device cuda
with float16, NCHW, normalised output feeds tsock-consume processes that copy every batch back
from the (simulated) device and check every element, including after kill -9 of a consumer and
of the producer. Standard library only; the harness is tsock_integration.py's."""
import json
import signal
import time

from cudasim import SimCleanup, sim_objects, use_sim_device
from itest import check, run
from tsock_integration import (BATCHES_PER_EPOCH, TSOCK_E_PRODUCER_LOST, Env, check_clean,
                               check_no_content_errors, read_stats)

GPU_OUTPUT = ["--device", "cuda", "--output", "float16", "--layout", "nchw", "--normalize"]


def wait_released(env, stats, pids, at_least, timeout=60):
    """Waits until the producer's interval records show every consumer in `pids` released at
    least `at_least` batches: an event, not a time, so it holds under sanitizers too."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(stats) as f:
                lines = [l for l in f.read().splitlines() if l.strip()]
            last = json.loads(lines[-1]) if lines else {}
        except (OSError, ValueError):
            last = {}
        done = {c["pid"] for c in last.get("consumers", []) if c["released"] >= at_least}
        if set(pids) <= done:
            return
        time.sleep(0.05)
    check(False, f"the consumers {sorted(pids)} did not release {at_least} batches each "
                 f"within {timeout} s")


def test_e2e_kill_consumer(env):
    stats = env.path("stats.json")
    # Library default heartbeats (a 5 s bound): the sanitizer builds run these too.
    prod = env.producer("--wait-consumers", "3", "--epochs", "2", "--stats-interval", "0.1",
                        *GPU_OUTPUT, stats=stats, hb=False)
    prod.wait_stderr("serving", 20)
    good = [env.consumer("--epochs", "2", "--normalize", "--delay-ms", str(d),
                         name=f"consumer-delay{d}", hb=False) for d in (0, 1)]
    # A long epoch grace: never paused by the library as a job that has not read (a loaded
    # run can start it late), so it holds its slots until it is killed.
    victim = env.consumer("--epochs", "2", "--normalize", "--delay-ms", "50",
                          "--epoch-grace-ms", "30000", name="victim", hb=False)
    # The victim holds everyone to its pace (4 slots of slack): soon after all three joined is
    # early in epoch 0 (waiting for the join, not a fixed time, holds under sanitizers).
    wait_released(env, stats, [victim.pid], 2)
    check(victim.running(), "the slow consumer ended before it could be killed")
    victim.p.send_signal(signal.SIGKILL)
    victim.wait(5)
    for c in good:
        rc = c.wait(60)
        res = c.json()
        check(rc == 0, f"{c.name} exit code {rc}")
        check_clean(res, c.name, 2)
        check(res["views"] + res["gathers"] == res["batches"], f"{c.name}: {res}")
    rc = prod.wait(20)
    check(rc == 0, f"producer exit code {rc}")
    st = read_stats(stats)
    check(st["consumers_lost"] == 1, f"consumers_lost = {st['consumers_lost']}, expected 1")
    check(st["batches"] == BATCHES_PER_EPOCH * 2, f"producer published {st['batches']} batches")
    check("SIMULATED" in prod.stderr(), "the producer did not say it ran on the simulated device")
    check(not sim_objects(), f"simulated device memory left behind: {sim_objects()}")


def test_e2e_kill_producer(env):
    stats = env.path("stats.json")
    prod = env.producer("--wait-consumers", "2", "--epochs", "0", "--stats-interval", "0.1",
                        *GPU_OUTPUT, stats=stats, hb=False)
    prod.wait_stderr("serving", 20)
    cons = [env.consumer("--epochs", "0", "--normalize", "--delay-ms", "1", name=f"consumer{i}",
                         hb=False)
            for i in range(2)]
    wait_released(env, stats, [c.pid for c in cons], 2)
    for c in cons:
        check(c.running(), f"{c.name} ended before the producer was killed: {c.stdout()}")
    prod.p.send_signal(signal.SIGKILL)
    prod.wait(5)
    for c in cons:
        rc = c.wait(20, "after the producer was killed")
        res = c.json()
        check(rc == 1, f"{c.name} exit code {rc}, expected 1")
        check(res["error_code"] == TSOCK_E_PRODUCER_LOST,
              f"{c.name}: error_code {res['error_code']} ({res['error']})")
        check(res["batches"] > 0, f"{c.name} received nothing before the kill")
        check_no_content_errors(res, c.name)
    # The consumers closed the dead producer's ring; the last one removed its objects, as the
    # driver frees a dead process's memory once nobody maps it.
    check(not sim_objects(), f"simulated device memory left behind: {sim_objects()}")


def test_e2e_group(env):
    """A group of three ranks on a GPU ring: each rank's blocks are views of device slots or
    gathers on the device (the padding sample copied into place there), every element checked;
    the ranks' shares together are each epoch once, plus the padding."""
    n = 2000  # 667 per rank: one padding sample for two of the three ranks
    prod = env.producer("--epochs", "0", *GPU_OUTPUT, samples=n, hb=False)
    prod.wait_stderr("serving", 20)
    ranks = [env.consumer("--group", "gpu", "--rank", str(r), "--world-size", "3",
                          "--batch-size", "20", "--epochs", "2", "--normalize", "--timeout-ms",
                          "60000", "--ids-out", env.path(f"rank{r}.ids"), samples=n,
                          name=f"rank{r}", hb=False) for r in range(3)]
    for c in ranks:
        rc = c.wait(120)
        res = c.json()
        check(rc == 0, f"{c.name} exit code {rc}: {res.get('error')}")
        check_no_content_errors(res, c.name)
        check(res["epochs"] == 2 and res["samples"] == 2 * 667 and res["missing"] == 0 and
              res["duplicates"] == 0, f"{c.name}: {res}")
    for e in range(2):
        shares = []
        for r in range(3):
            with open(env.path(f"rank{r}.ids")) as f:
                shares.append([int(l.split()[1]) for l in f if int(l.split()[0]) == e])
        union = set().union(*map(set, shares))
        check(union == set(range(n)) and sum(map(len, shares)) == 3 * 667,
              f"epoch {e}: {n - len(union)} samples missing, {sum(map(len, shares))} received")
    prod.signal(signal.SIGTERM)
    prod.wait(20)


TESTS = {
    "e2e_kill_consumer": test_e2e_kill_consumer,
    "e2e_kill_producer": test_e2e_kill_producer,
    "e2e_group": test_e2e_group,
}


class SimEnv(SimCleanup, Env):
    """Env, plus: whatever a failed test's killed processes left on the simulated device goes
    with the rest of the test's files."""


def make_env(args, test):
    use_sim_device("it")
    return SimEnv(args, test)


if __name__ == "__main__":
    run(__doc__, TESTS, make_env, [("producer", True), ("consume", True)])
