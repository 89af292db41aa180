"""The binding without torch: the loader and producer tests run again in a process where
`import torch` fails (as if torch were not installed), and TSOCK_NO_TORCH=1 is honoured."""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(HERE, "no_torch"), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def test_core_tests_pass_without_torch(tsock):
    files = [os.path.join(HERE, f) for f in ("test_loader.py", "test_producer.py")]
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files],
                       env=_env(TSOCK_TEST_EXPECT_NO_TORCH="1"), cwd=HERE,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    summary = r.stdout.strip().splitlines()[-1]
    assert " passed" in summary and not re.search(r"\b\d+ (failed|error)", summary), summary


SCRIPT = r"""
import sys, tempfile, numpy as np, tsock
tmp = tempfile.TemporaryDirectory(prefix="tsock-py-")  # removed at exit
ep = f"ipc://{tmp.name}/s.sock"
with tsock.Producer(ep, batch_size=2, names=("image", "label")) as p:
    p.start((np.zeros((2, 3), np.uint8), np.zeros(2, np.int64)))
    with tsock.DataLoader(ep, timeout=10) as loader:
        p.wait_consumers(1, timeout=10)
        p.publish((np.ones((2, 3), np.uint8), np.arange(2)), epoch_end=True)
        (x, y), = list(loader)
        assert loader.output == "numpy", loader.output
        assert isinstance(x, np.ndarray) and x.sum() == 6 and y.tolist() == [0, 1]
assert "torch" not in sys.modules, "tsock imported torch"
print("ok")
"""


def test_tsock_no_torch_env_gives_numpy_and_never_imports_torch(tsock):
    env = dict(os.environ, TSOCK_NO_TORCH="1")
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
