#!/usr/bin/env python3
"""Resource limits at start: a ring that does not fit in shared memory, and a low descriptor
limit, are clear errors or warnings when the producer starts, never a signal later.

    shm_limits_test.py TEST --producer PATH --consume PATH

shm_too_small and shm_fits run the producer in a private mount namespace (unshare -m) whose
/dev/shm is an 8 MiB tmpfs, as in a container with a small --shm-size. Without the right to
create a mount namespace and mount a tmpfs (no root, no CAP_SYS_ADMIN, a seccomp profile),
they print a SKIP line and exit 77, which ctest reports as skipped. Standard library only.
"""
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile

from itest import check, run  # the shared harness, beside this file

SKIP = 77
SHM_MB = 8
# Inside the namespace: mount the small /dev/shm, run the command given as "$@", then list
# what was left in /dev/shm (nothing may be) and report the command's status on the last line.
NS_SCRIPT = f"""
mount -t tmpfs -o size={SHM_MB}m,mode=1777 tmpfs /dev/shm || {{ echo "MOUNT-FAILED"; exit 90; }}
"$@"
rc=$?
echo "LEFT: $(ls -A /dev/shm | tr '\\n' ' ')"
echo "STATUS: $rc"
"""


def namespaces_usable():
    """Why a private mount namespace with its own tmpfs cannot be had here, or None."""
    if not shutil.which("unshare"):
        return "the unshare program (util-linux) is not installed"
    try:
        r = subprocess.run(["unshare", "-m", "sh", "-c",
                            f"mount -t tmpfs -o size={SHM_MB}m tmpfs /dev/shm"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unshare -m failed: {e}"
    if r.returncode != 0:
        return (f"cannot create a mount namespace with a tmpfs on /dev/shm (needs root or "
                f"CAP_SYS_ADMIN): {r.stderr.strip()}")
    return None


class Env:
    def __init__(self, args, test):
        self.args = args
        self.dir = tempfile.mkdtemp(prefix=f"tsock-shm-{test}-")
        os.chmod(self.dir, 0o700)
        self.ipc = "ipc://" + os.path.join(self.dir, "p.sock")
        self.log = []

    def in_namespace(self, argv, timeout=60):
        """Runs argv in a private mount namespace with an 8 MiB /dev/shm. Returns (status of
        argv as the shell saw it, what was left in /dev/shm, stdout, stderr)."""
        cmd = ["unshare", "-m", "sh", "-c", NS_SCRIPT, "sh", *argv]
        # A session of its own, so a timeout kills everything started inside.
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            self.log.append((cmd, out, err))
            check(False, f"did not finish within {timeout} s: {argv}")
        self.log.append((cmd, out, err))
        check("MOUNT-FAILED" not in out, f"mounting the tmpfs failed: {err}")
        status = re.search(r"^STATUS: (\d+)$", out, re.M)
        left = re.search(r"^LEFT: (.*)$", out, re.M)
        check(status and left, f"the namespace script did not finish: {out!r}")
        return int(status.group(1)), left.group(1).split(), out, err

    def producer_argv(self, *extra):
        return [self.args.producer, "--dataset", "synthetic", "--endpoint", self.ipc,
                "--epochs", "1", "--quiet", *extra]

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def dump(self):
        for cmd, out, err in self.log:
            print(f"--- {cmd}\n--- stdout:\n{out}\n--- stderr:\n{err}")


def test_shm_too_small(env):
    """The default ring of 224x224 images (64 x 8 slots, about 73.5 MiB) on an 8 MiB /dev/shm:
    a prompt exit with status 1, one message with both figures and the fixes, no SIGBUS, and
    nothing left in /dev/shm."""
    argv = env.producer_argv("--image-size", "224", "--batch-size", "64", "--slots", "8")
    status, left, _, err = env.in_namespace(argv, timeout=30)
    check(status != 128 + signal.SIGBUS, f"the producer died of SIGBUS: {err}")
    check(status < 128, f"the producer died of signal {status - 128}: {err}")
    check(status == 1, f"expected exit status 1, got {status}: {err}")
    m = re.search(r"the ring needs (\d+) bytes .*?/dev/shm has (\d+) bytes .*?available", err)
    check(m, f"no message naming the bytes needed and available: {err}")
    needed, avail = int(m.group(1)), int(m.group(2))
    ring_min = 64 * 8 * 224 * 224 * 3
    check(needed >= ring_min, f"needed {needed} bytes, less than the images alone ({ring_min})")
    check(avail <= SHM_MB << 20, f"available {avail} bytes, more than the {SHM_MB} MiB tmpfs")
    for fix in ("--slots", "--batch-size", "--shm-size=", "--ipc=host", "medium: Memory"):
        check(fix in err, f"the message does not name the fix {fix!r}: {err}")
    check("[error]" in err, f"the message is not an error line: {err}")
    check(not left, f"shared memory left behind: {left}")
    check(not os.path.exists(env.ipc[len("ipc://"):]), "the socket file was created")


def test_shm_fits(env):
    """The same producer with a ring that fits the 8 MiB /dev/shm serves a consumer normally."""
    samples = 512
    consume = os.path.join(env.dir, "consume.json")
    # sh -c SCRIPT fits PRODUCER ARGS...: "$@" is the producer's command line.
    script = ('"$@" & pp=$!; '
              'while [ ! -S "$SOCK" ] && kill -0 $pp 2>/dev/null; do sleep 0.05; done; '
              '"$CONSUME" --endpoint "$ENDPOINT" --epochs 1 --json --timeout-ms 30000 '
              '>"$OUT"; crc=$?; wait $pp; prc=$?; echo "producer=$prc consumer=$crc"; '
              '[ $prc = 0 ] && [ $crc = 0 ]')
    os.environ.update(CONSUME=env.args.consume, ENDPOINT=env.ipc, OUT=consume,
                      SOCK=env.ipc[len("ipc://"):])
    argv = env.producer_argv("--samples", str(samples), "--batch-size", "32", "--slots", "4",
                             "--wait-consumers", "1")
    status, left, out, err = env.in_namespace(["sh", "-c", script, "fits", *argv], timeout=60)
    check(status == 0, f"producer or consumer failed (status {status}): {out} {err}")
    with open(consume) as f:
        res = json.loads(f.read().strip().splitlines()[-1])
    check(res["samples"] == samples and res["epochs"] == 1,
          f"consumer got {res['samples']} samples in {res['epochs']} epochs")
    check(res["content_errors"] == 0 and res["missing"] == 0 and res["duplicates"] == 0,
          f"consumer found errors: {res}")
    check("does not fit" not in err, f"a fitting ring was refused: {err}")
    check(not left, f"shared memory left behind: {left}")


def test_nofile(env):
    """A descriptor limit that leaves the producer little room is said clearly at start,
    naming RLIMIT_NOFILE and how to raise it; the producer still stops cleanly."""
    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (24, 24))

    argv = env.producer_argv("--samples", "64")
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=limit)
    try:
        sock = env.ipc[len("ipc://"):]
        for _ in range(200):
            if os.path.exists(sock) or p.poll() is not None:
                break
            subprocess.run(["sleep", "0.05"])
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    env.log.append((argv, out, err))
    check(p.returncode >= 0, f"the producer died of signal {-p.returncode}: {err}")
    check("RLIMIT_NOFILE" in err and "ulimit -n" in err,
          f"no warning about the descriptor limit: {err}")


def test_memlock(env):
    """A GPU ring's pinned staging that the locked-memory limit leaves no room for is a prompt,
    clear error naming the bytes needed, the limit and the fixes (run on the simulated device,
    which counts pinned memory against RLIMIT_MEMLOCK as some container runtimes make the
    driver do); the same producer with room serves."""
    def limit():
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (64 * 1024, 64 * 1024))

    environ = dict(os.environ, TSOCK_CUDA_SIM="1")
    argv = env.producer_argv("--samples", "64", "--device", "cuda", "--image-size", "64",
                             "--batch-size", "16", "--slots", "4")
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       preexec_fn=limit, env=environ, timeout=60)
    env.log.append((argv, r.stdout, r.stderr))
    check(r.returncode == 1, f"exit status {r.returncode}, expected 1: {r.stderr}")
    check("RLIMIT_MEMLOCK" in r.stderr and "locked memory" in r.stderr and
          "ulimit -l" in r.stderr and "--ulimit memlock" in r.stderr,
          f"no clear message about the locked-memory limit: {r.stderr}")
    check(re.search(r"needs \d+ bytes of locked memory and this process may lock 65536",
                    r.stderr), f"the message does not give both figures: {r.stderr}")


TESTS = {"shm_too_small": test_shm_too_small, "shm_fits": test_shm_fits,
         "nofile": test_nofile, "memlock": test_memlock}


def main():
    if len(sys.argv) > 1 and sys.argv[1].startswith("shm_"):
        why = namespaces_usable()
        if why:
            print(f"SKIP: {sys.argv[1]}: {why}")
            sys.exit(SKIP)
    run(__doc__, TESTS, Env, [("producer", True), ("consume", True)])


if __name__ == "__main__":
    main()
