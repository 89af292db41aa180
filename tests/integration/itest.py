"""What every integration test script shares: the failure type, `check`, and a main that runs
one named test with its environment and reports PASS or FAIL (dumping what the processes
printed on a failure). Standard library only."""
import argparse
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
