"""The binding's GPU path: device arguments, TSOCK_E_NO_DEVICE without a GPU, and (on a machine
with one) torch CUDA tensors that are zero-copy views of a producer's ring in GPU memory,
waited for on torch's current stream and released stream-ordered.

The GPU cases need a CUDA device that both torch and libtsock can use, and a producer in
another process (CUDA IPC cannot open a handle in the process that made it); they are skipped
with the reason otherwise."""
import os
import subprocess
import sys
import textwrap

import pytest


def _gpu_ready(tsock):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    if tsock.cuda_device_count() == 0:
        pytest.skip("libtsock sees no usable CUDA device (or was built without its backend)")
    return torch


def test_device_arguments(tsock, tmp_path):
    from tsock.consumer import _cuda_index
    from tsock.producer import _cuda_device

    assert _cuda_index(None) is None and _cuda_index("cpu") is None
    assert _cuda_index("cuda") == -1 and _cuda_index("cuda:2") == 2
    assert _cuda_device("cuda") == 0 and _cuda_device("cuda:1") == 1
    assert _cuda_device(None) is None and _cuda_device("cpu") is None
    for bad in ("cuda:x", "tpu", "cuda:-1", "gpu:0"):
        with pytest.raises(ValueError):
            _cuda_index(bad)
        with pytest.raises(ValueError):
            _cuda_device(bad)
    with pytest.raises(ValueError, match="output='torch'"):
        tsock.DataLoader(f"ipc://{tmp_path}/none.sock", device="cuda", output="numpy")


def test_no_device_errors(tsock, tmp_path):
    if tsock.cuda_device_count() > 0:
        pytest.skip("this machine has a usable GPU: E_NO_DEVICE cannot be provoked this way")
    import numpy as np

    p = tsock.Producer(f"ipc://{tmp_path}/gpu.sock", device="cuda", names=("x",))
    with pytest.raises(tsock.TsockError) as info:
        p.publish((np.zeros((4, 8), np.uint8),))
    assert info.value.code == tsock.E_NO_DEVICE
    assert "GPU" in str(info.value)
    p.close()


# The producer keeps its ring until the test says the consumer is gone (a line on stdin), so the
# ring is never freed under a consumer that still maps it.
PRODUCER = textwrap.dedent("""
    import sys, numpy as np, tsock
    with tsock.Producer(sys.argv[1], device="cuda", names=("image", "label"), slots=4) as p:
        p.start((np.zeros((8, 4, 4, 3), np.uint8), np.zeros(8, np.int64)))
        p.wait_consumers(1, timeout=60)
        for i in range(12):
            images = np.full((8, 4, 4, 3), i, np.uint8)
            p.publish((images, np.arange(8, dtype=np.int64) + 8 * i))
        sys.stdin.readline()
""")


def test_cuda_tensors_from_a_gpu_ring(tsock, tmp_path):
    torch = _gpu_ready(tsock)
    endpoint = f"ipc://{tmp_path}/gpu.sock"
    script = tmp_path / "producer.py"
    script.write_text(PRODUCER)
    producer = subprocess.Popen([sys.executable, str(script), endpoint], env=os.environ.copy(),
                                stdin=subprocess.PIPE)
    try:
        loader = tsock.DataLoader(endpoint, device="cuda", timeout=60, samples=96)
        seen = 0
        for images, labels in loader:
            assert images.is_cuda and labels.is_cuda
            assert images.shape == (8, 4, 4, 3) and images.dtype == torch.uint8
            # Work queued on the current stream after the wait; the release of this batch
            # (when the next is asked for) is ordered after it.
            first = int(labels[0].item()) // 8
            assert bool((images == first).all().item())
            seen += 1
            if seen == 12:
                break
        assert seen == 12
        loader.close()
    finally:
        producer.communicate(b"done\n", timeout=60)
    assert producer.returncode == 0
