"""tsock: one data-loading pipeline shared by several training processes.

A producer fills the slots of a rolling shared-memory buffer; each training process reads
every batch in place (zero-copy). This package is a ctypes binding of libtsock:

    loader = tsock.DataLoader("ipc:///tmp/tsock/train.sock")   # instead of a torch DataLoader
    for images, labels in loader:
        ...

See docs/python.md. Batches are read-only views of shared memory: never modify one in place.
"""
from . import _lib, _programs
from ._lib import LibraryNotFound, VersionMismatch, default_endpoint
from .consumer import Batch, Consumer, DataLoader, TensorInfo
from .errors import (
    E_AUTH,
    E_BAD_SAMPLE,
    E_BUSY_ENDPOINT,
    E_CANCELLED,
    E_DEVICE_UNUSABLE,
    E_END,
    E_EPOCH_INTERRUPTED,
    E_FULL,
    E_INSECURE,
    E_LAYOUT,
    E_NO_DEVICE,
    E_BAD_STATE,
    E_GROUP_INCOMPLETE,
    E_GROUP_LOST,
    E_GROUP_MISMATCH,
    E_NOT_HELD,
    E_PRODUCER_LOST,
    E_PRODUCER_STOPPED,
    E_PROTOCOL,
    E_REJECTED,
    E_STATE,
    E_VERSION,
    EndOfStream,
    EpochInterrupted,
    BadState,
    GroupIncomplete,
    GroupLost,
    GroupMismatch,
    ProducerLost,
    ProducerStopped,
    Timeout,
    TsockError,
)
from .launch import ProducerHandle, ensure_producer
from .producer import Producer
from .security import curve_keygen
from .stats import query_stats

try:  # written by the build (pip install .) from include/tsock/version.h
    from ._version import __version__
except ImportError:  # a source checkout, used through TSOCK_LIBRARY: the library's version
    __version__ = _lib.version

#: Path of the libtsock shared library in use.
library_path = _lib.path


def build_info():
    """What the loaded libtsock was built with, as a dict: ``version`` (str), ``cuda`` (True
    when the CUDA backend was compiled with a CUDA toolkit: GPU rings work where a driver and
    a device are present), ``io_uring`` (bool), ``library`` (its path) and ``programs`` (the
    folder of the programs installed with this package, or None for a source checkout)."""
    _lib.require("tsock_build_info", "tsock.build_info()")
    info = {"library": _lib.path, "programs": _programs.BIN_DIR if _programs.packaged(
        "tsock-producer") else None}
    for word in _lib.lib.tsock_build_info().decode("utf-8", "replace").split():
        key, _, value = word.partition("=")
        info[key] = value if key == "version" else value == "1"
    return info

#: Version of that library, as a string and as (major, minor, patch).
library_version = _lib.version
library_version_info = _lib.version_info

LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG = 0, 1, 2, 3


def strerror(code):
    """tsock_strerror(code): the description of any return code."""
    return _lib.strerror(code)


def cuda_device_count():
    """How many CUDA devices libtsock can use here (0: none, or a libtsock built without its
    CUDA backend). A producer with device="cuda" needs at least one."""
    n = _lib.lib.tsock_cuda_device_count()
    return n if n > 0 else 0


def set_log(callback, level=LOG_WARN):
    """Routes libtsock's log lines to ``callback(level, message)`` (None: discard, the default).

    The callback may run on the library's internal threads: keep it short and thread-safe.
    For example, to use the logging module::

        log = logging.getLogger("tsock")
        tsock.set_log(lambda lvl, msg: log.log([40, 30, 20, 10][lvl], msg))
    """
    _lib.set_log(callback, level)


__all__ = [
    "Batch", "Consumer", "DataLoader", "Producer", "ProducerHandle", "TensorInfo",
    "TsockError", "EndOfStream", "EpochInterrupted", "BadState", "GroupIncomplete", "GroupLost", "GroupMismatch", "ProducerLost", "ProducerStopped", "Timeout",
    "LibraryNotFound", "VersionMismatch",
    "E_AUTH", "E_BAD_SAMPLE", "E_BAD_STATE", "E_BUSY_ENDPOINT", "E_CANCELLED", "E_DEVICE_UNUSABLE", "E_END", "E_EPOCH_INTERRUPTED", "E_FULL", "E_GROUP_INCOMPLETE", "E_GROUP_LOST", "E_GROUP_MISMATCH", "E_INSECURE", "E_LAYOUT", "E_NO_DEVICE", "E_NOT_HELD", "E_PRODUCER_LOST",
    "E_PRODUCER_STOPPED", "E_PROTOCOL", "E_REJECTED", "E_STATE", "E_VERSION",
    "LOG_ERROR", "LOG_WARN", "LOG_INFO", "LOG_DEBUG",
    "build_info", "default_endpoint", "library_path", "library_version", "library_version_info",
    "cuda_device_count", "curve_keygen", "ensure_producer", "query_stats", "set_log", "strerror",
]
