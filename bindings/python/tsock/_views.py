"""Zero-copy views of tensor memory, and the bridge to torch.

A tensor of a tsock batch is a pointer, a dtype and a shape. This module turns that into an
array without copying:

- host memory (TSOCK_DEVICE_CPU): a numpy array built from ``__array_interface__`` with the
  read-only flag set, so numpy refuses writes; ``torch.from_numpy`` then shares the memory.
- device memory (TSOCK_DEVICE_CUDA): a torch CUDA tensor built from ``__cuda_array_interface__``
  (see :class:`CudaMemory` and :func:`device_tensor`); the consumer makes the current torch
  stream wait for the batch first (tsock_batch_wait) and releases it stream-ordered.

The view object (:class:`HostMemory`) is the array's ``base``: it keeps a reference to whatever
owns the memory (the batch), so the owner lives as long as any array that points into it.
"""
import os
import sys
import warnings

import numpy as np

# tsock dtype codes (include/tsock/tsock.h, enum tsock_dtype).
UINT8, INT8, INT16, INT32, INT64 = 1, 2, 3, 4, 5
FLOAT16, FLOAT32, FLOAT64 = 6, 7, 8
UINT16, UINT32, UINT64 = 9, 10, 11
BFLOAT16 = 12

DEVICE_CPU = 0
DEVICE_CUDA = 1

# tsock dtype -> numpy dtype. numpy has no bfloat16: its bits travel as uint16 and torch views
# them as torch.bfloat16 (numpy users get the raw uint16 bits).
NUMPY_DTYPES = {
    UINT8: np.dtype(np.uint8),
    INT8: np.dtype(np.int8),
    INT16: np.dtype(np.int16),
    INT32: np.dtype(np.int32),
    INT64: np.dtype(np.int64),
    FLOAT16: np.dtype(np.float16),
    FLOAT32: np.dtype(np.float32),
    FLOAT64: np.dtype(np.float64),
    UINT16: np.dtype(np.uint16),
    UINT32: np.dtype(np.uint32),
    UINT64: np.dtype(np.uint64),
    BFLOAT16: np.dtype(np.uint16),
}

# numpy dtype -> tsock dtype (the producer side). bool is stored as uint8.
TSOCK_DTYPES = {dt: code for code, dt in NUMPY_DTYPES.items() if code != BFLOAT16}
TSOCK_DTYPES[np.dtype(np.bool_)] = UINT8


def tsock_dtype_of(np_dtype):
    """The tsock dtype code for a numpy dtype, or raise TypeError."""
    dt = np.dtype(np_dtype).newbyteorder("=")
    try:
        return TSOCK_DTYPES[dt]
    except KeyError:
        raise TypeError(
            f"tsock cannot carry dtype {np_dtype}: supported are uint8/16/32/64, int8/16/32/64, "
            f"float16/32/64, bool (as uint8) and torch.bfloat16") from None


class HostMemory:
    """Exposes host memory to numpy through the array interface, without copying.

    `owner` is kept alive as long as this object (and so every array built on it) lives.
    """

    __slots__ = ("__array_interface__", "owner", "__weakref__")

    def __init__(self, address, shape, typestr, readonly, owner):
        self.__array_interface__ = {
            "version": 3,
            "shape": shape,
            "typestr": typestr,
            "data": (address, readonly),
        }
        self.owner = owner


class CudaMemory:
    """Exposes device memory to torch/cupy/numba through ``__cuda_array_interface__``.

    "stream" is None: the caller has already made the stream that will read the memory wait
    for it (tsock_batch_wait), so the importer needs no synchronisation of its own.
    """

    __slots__ = ("__cuda_array_interface__", "owner", "__weakref__")

    def __init__(self, address, shape, typestr, readonly, owner, stream=None):
        self.__cuda_array_interface__ = {
            "version": 3,
            "shape": shape,
            "typestr": typestr,
            "data": (address, readonly),
            "strides": None,
            "stream": stream,
        }
        self.owner = owner


def host_array(address, shape, np_dtype, owner, readonly=True):
    """A numpy array over host memory at `address` (zero-copy), read-only by default."""
    if address is None or address == 0:
        raise ValueError("tsock returned a NULL tensor pointer")
    return np.asarray(HostMemory(address, shape, np_dtype.str, readonly, owner))


class CachedView:
    """The base array of one tensor placement (address, shape, dtype) and, made on first use,
    the torch tensor on it. Callers hand out fresh view objects of these (numpy .view(),
    torch .detach()), so whatever a user does to an object (requires_grad_, resize_) never
    reaches the next batch's."""

    __slots__ = ("array", "tensor", "_tensor_uses")

    def __init__(self, array):
        self.array = array
        self.tensor = None
        self._tensor_uses = None

    def make_tensor(self, bfloat16):
        self.tensor = to_torch(self.array, bfloat16)
        use_count = getattr(_torch._C, "_storage_Use_Count", None)
        if use_count is not None:
            self._tensor_uses = (use_count, use_count(self.tensor.untyped_storage()._cdata))
        return self.tensor

    def views_alive(self):
        """Whether views handed out may still be alive (best effort, for a warning)."""
        # References we hold: self.array, the torch storage's (once a tensor exists), and
        # getrefcount's own argument. Any more are views handed out (numpy .view() objects).
        if sys.getrefcount(self.array) > 2 + (self.tensor is not None):
            return True
        if self._tensor_uses is not None:
            use_count, base = self._tensor_uses
            return use_count(self.tensor.untyped_storage()._cdata) > base
        return False


def device_tensor(address, shape, np_dtype, bfloat16, owner, device):
    """A torch CUDA tensor over device memory at `address` on CUDA device `device` (zero-copy).

    The memory is declared writable: torch cannot protect device memory anyway, and tsock's
    rule (never modify a batch in place) is the protection. The device is passed explicitly:
    without it, torch.as_tensor copies to the CPU on torch < 2.5, and to the default device
    under torch.set_default_device. The result is checked to be the batch's memory itself.
    """
    torch = get_torch()
    if torch is None:
        raise ImportError("a batch in GPU memory is read as torch tensors, and torch is not "
                          "importable (or TSOCK_NO_TORCH is set)")
    if not address:
        raise ValueError("tsock returned a NULL tensor pointer")
    t = torch.as_tensor(CudaMemory(address, shape, np_dtype.str, False, owner),
                        device=torch.device("cuda", device))
    check_zero_copy(t, address, "cuda", device)
    if bfloat16:
        t = t.view(torch.bfloat16)
    return t


def check_zero_copy(t, address, kind, index):
    """Raises RuntimeError unless tensor `t` is the batch's memory itself: on the batch's
    device (`kind`, `index`) and at its address. A copy would be read after the slot is
    refilled, or on the wrong device, without any error."""
    if t.device.type != kind or (index is not None and t.device.index != index):
        raise RuntimeError(f"the batch is on {kind}:{index} but torch made a tensor on "
                           f"{t.device}: a copy, not a view of the batch")
    if t.data_ptr() != address:
        raise RuntimeError(f"torch copied the batch (tensor at {t.data_ptr():#x}, batch at "
                           f"{address:#x}) instead of viewing it")


# ---- torch, optional ----

_torch = None
_torch_checked = False


def torch_disabled():
    """True when the user asked for numpy only (TSOCK_NO_TORCH=1)."""
    return os.environ.get("TSOCK_NO_TORCH", "") not in ("", "0")


def get_torch():
    """The torch module, or None when it is not installed or TSOCK_NO_TORCH is set.

    Imported lazily: ``import tsock`` stays fast, and numpy-only users never load torch.
    """
    global _torch, _torch_checked
    if not _torch_checked:
        _torch_checked = True
        if not torch_disabled():
            try:
                import torch  # noqa: F401

                _torch = sys.modules["torch"]
            except ImportError:
                _torch = None
    return _torch


_from_numpy_quiet = False


def to_torch(array, bfloat16=False):
    """torch.from_numpy on a read-only array, without torch's warning about it.

    torch warns once per process that it cannot protect non-writable memory. tsock documents
    that batches must never be modified in place, so the warning is silenced here, for this
    call only: later calls do not warn anyway (it is a once-per-process warning), which keeps
    catch_warnings, which is slow, off the per-batch path.
    """
    global _from_numpy_quiet
    torch = _torch
    if _from_numpy_quiet:
        t = torch.from_numpy(array)
    else:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            t = torch.from_numpy(array)
        _from_numpy_quiet = True
    if bfloat16:
        t = t.view(torch.bfloat16)
    return t
