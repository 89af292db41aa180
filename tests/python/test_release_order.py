"""The binding's release ordering and device decisions (issue 12, items 4 and 7), with the real
library and a real tsock-producer. What needs a CUDA tensor (torch here is CPU-only) is tested
where it can be: the zero-copy check on host tensors; the multi-stream release runs only on a
machine with a GPU (test_cuda.py)."""
import numpy as np
import pytest

from tsock_testutil import start_producer


def test_failed_release_leaves_batch_held(tsock, programs, procs, endpoint):
    """A release that fails in the library leaves the Python batch held and retryable: the
    handle is cleared only after the C call succeeded."""
    start_producer(programs, procs, endpoint, batch_size=8, samples=64, epochs=1)
    c = tsock.Consumer(endpoint, timeout=20)
    try:
        b = c.next(timeout=20)
        ptr = b._ptr
        # Released behind the binding's back: the library now refuses the binding's release.
        assert tsock._lib.lib.tsock_consumer_release(c._h, ptr) == 0
        with pytest.raises(tsock.TsockError) as info:
            b.release()
        assert info.value.code == tsock.E_NOT_HELD
        assert not b.released, "a failed release must leave the batch held"
        assert ptr in c._held
    finally:
        c._held.clear()  # the library holds nothing more; close must not release it again
        c.close()


def test_zero_copy_check(tsock):
    """A tensor torch built from a batch must be the batch's memory, on the batch's device."""
    torch = pytest.importorskip("torch")
    from tsock._views import check_zero_copy

    a = np.arange(16, dtype=np.uint8)
    t = torch.from_numpy(a)
    check_zero_copy(t, a.ctypes.data, "cpu", None)
    with pytest.raises(RuntimeError, match="copied"):
        check_zero_copy(t.clone(), a.ctypes.data, "cpu", None)
    with pytest.raises(RuntimeError, match="cuda:0"):
        check_zero_copy(t, a.ctypes.data, "cuda", 0)
