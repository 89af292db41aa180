"""What every integration test script shares: the failure type, `check`, and a main that runs
one named test with its environment and reports PASS or FAIL (dumping what the processes
printed on a failure); waiting on a condition, and reading `--ids-out` files. Standard
library only."""
import argparse
import os
import sys
import time


class Failure(Exception):
    pass


class Skip(Exception):
    """The test cannot run here: reported as "SKIP: why" and exit status 77, which ctest counts
    as skipped for tests registered with SKIP_RETURN_CODE 77."""


def check(cond, what):
    if not cond:
        raise Failure(what)


def wait_for(cond, timeout, what):
    """Polls `cond` until it is true; a Failure after `timeout` seconds (a bound on a hang,
    not a timing check)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.02)
    raise Failure(f"timed out waiting for {what}")


def read_ids(path):
    """{epoch: [ids in order]} from a `tsock-consume --ids-out` file (`EPOCH ID` lines; a torn
    last line, left by a kill, is ignored)."""
    out = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            if not line.endswith("\n"):
                break
            e, i = line.split()
            out.setdefault(int(e), []).append(int(i))
    return out


def main(doc, tests, make_env, arguments):
    """Parses `TEST --option PATH ...` (`arguments`: (name, required) pairs), builds the test's
    environment with make_env(args, test) (an object with cleanup() and dump()), runs it and
    returns the exit status (0 passed, 1 failed, 77 skipped)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("test", choices=sorted(tests))
    for name, required in arguments:
        ap.add_argument(f"--{name}", required=required)
    args = ap.parse_args()
    env = make_env(args, args.test)
    started = time.monotonic()
    try:
        tests[args.test](env)
    except Failure as e:
        print(f"FAIL {args.test}: {e}")
        env.dump()
        return 1
    except Skip as e:
        print(f"SKIP: {args.test}: {e}")
        return 77
    except Exception:
        env.dump()
        raise
    finally:
        env.cleanup()
    print(f"PASS {args.test} ({time.monotonic() - started:.1f} s)")
    return 0


def run(doc, tests, make_env, arguments):
    sys.exit(main(doc, tests, make_env, arguments))
