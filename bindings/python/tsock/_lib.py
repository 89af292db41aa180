"""Finds libtsock, checks its version, and declares every C function the binding uses.

This module is the only place that knows C signatures: each function is declared exactly once
here (argtypes and restype), from include/tsock/tsock.h. Everything else calls ``lib.<name>``
and turns negative returns into exceptions with :func:`check`.

Where the library comes from, in order:
 1. ``$TSOCK_LIBRARY``: a path to libtsock.so (an error if it cannot be loaded: no fallback, so
    a typo never silently picks up another copy);
 2. a copy next to this package (``tsock/libtsock.so.0`` or ``tsock/libtsock.so``);
 3. the system: ``ctypes.util.find_library("tsock")``, then ``libtsock.so.0``.
"""
import atexit
import collections
import ctypes
import ctypes.util
import os

from . import errors

# The C library version this binding was written for: its major must match, its minor must be
# at least this one (minor versions only add functions).
EXPECTED_MAJOR = 0
EXPECTED_MINOR = 2

c_int = ctypes.c_int
c_uint32 = ctypes.c_uint32
c_uint64 = ctypes.c_uint64
c_int64 = ctypes.c_int64
c_size_t = ctypes.c_size_t
c_char_p = ctypes.c_char_p
c_void_p = ctypes.c_void_p
P = ctypes.POINTER


class LibraryNotFound(ImportError):
    """libtsock could not be found or loaded."""


class VersionMismatch(ImportError):
    """The loaded libtsock is not compatible with this binding."""


def _candidates():
    env = os.environ.get("TSOCK_LIBRARY")
    if env:
        return [("$TSOCK_LIBRARY", env)], True
    here = os.path.dirname(os.path.abspath(__file__))
    found = []
    for name in ("libtsock.so.0", "libtsock.so"):
        path = os.path.join(here, name)
        if os.path.exists(path):
            found.append(("next to the package", path))
    system = ctypes.util.find_library("tsock")
    if system:
        found.append(("ctypes.util.find_library", system))
    found.append(("the dynamic loader", "libtsock.so.0"))
    return found, False


def _load():
    candidates, from_env = _candidates()
    tried = []
    for origin, path in candidates:
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            if from_env:
                raise LibraryNotFound(
                    f"cannot load libtsock from $TSOCK_LIBRARY={path!r}: {e}") from None
            tried.append(f"{path} ({origin}): {e}")
    raise LibraryNotFound(
        "cannot find libtsock. Set TSOCK_LIBRARY to the path of libtsock.so (for example "
        "build/libtsock/libtsock.so after building tsock with CMake), copy libtsock.so.0 next "
        "to the tsock package, or install it system-wide. Tried: " + "; ".join(tried))


lib, path = _load()


def _declare(name, restype, argtypes):
    try:
        fn = getattr(lib, name)
    except AttributeError:
        raise VersionMismatch(
            f"libtsock at {path} has no function {name}: it is older than this binding "
            f"expects ({EXPECTED_MAJOR}.{EXPECTED_MINOR}.x)") from None
    fn.restype = restype
    fn.argtypes = argtypes


#: Names of the C functions this binding can use but the loaded library lacks (see
#: :func:`require`).
missing = set()


def _declare_optional(name, restype, argtypes):
    """Declares a function of a newer library version that only some features need: a library
    without it still loads, and :func:`require` names it when a feature asks for it."""
    try:
        _declare(name, restype, argtypes)
    except VersionMismatch:
        missing.add(name)


def require(name, feature):
    """Raises NotImplementedError naming `feature` when the library lacks C function `name`."""
    if name in missing:
        raise NotImplementedError(
            f"{feature} needs the C function {name}, which libtsock at {path} (version "
            f"{version}) does not have: use a libtsock built with that feature")


# Log callback: void (*)(void *user, int level, const char *message).
LOG_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_char_p)

# ---- errors, version, logging ----
_declare("tsock_strerror", c_char_p, [c_int])
_declare("tsock_version", c_int, [])
_declare("tsock_version_string", c_char_p, [])
_declare_optional("tsock_build_info", c_char_p, [])
_declare("tsock_set_log", None, [LOG_FN, c_void_p, c_int])

# ---- layout ----
_declare("tsock_dtype_size", c_size_t, [c_int])
_declare("tsock_dtype_name", c_char_p, [c_int])
_declare("tsock_layout_create", c_int, [P(c_void_p)])
_declare("tsock_layout_add", c_int, [c_void_p, c_char_p, c_int, c_int, P(c_int64)])
_declare("tsock_layout_destroy", None, [c_void_p])

# ---- producer ----
_declare("tsock_producer_create", c_int,
         [P(c_void_p), c_char_p, c_void_p, c_uint32, c_uint32])
_declare("tsock_producer_set_heartbeat", c_int, [c_void_p, c_int, c_int])
_declare("tsock_producer_set_device", c_int, [c_void_p, c_int])
_declare("tsock_producer_set_sampler", c_int, [c_void_p, c_uint64, c_uint64, c_uint64])
_declare("tsock_producer_start", c_int, [c_void_p])
_declare("tsock_producer_stream_ended", c_int, [c_void_p])
_declare("tsock_slot_planned", c_uint32, [c_void_p])
_declare("tsock_slot_sample_ids", P(c_uint64), [c_void_p])
_declare("tsock_producer_endpoint", c_char_p, [c_void_p])

# ---- the native image pipeline (Producer.serve_images); newer than the rest ----
for _name, _res, _args in (
        ("tsock_pipeline_create", c_int, [P(c_void_p), c_int, c_char_p]),
        ("tsock_pipeline_set_preset", c_int, [c_void_p, c_int]),
        ("tsock_pipeline_set_image_size", c_int, [c_void_p, c_int]),
        ("tsock_pipeline_set_workers", c_int, [c_void_p, c_int]),
        ("tsock_pipeline_set_seed", c_int, [c_void_p, c_uint64]),
        ("tsock_pipeline_set_on_error", c_int, [c_void_p, c_int]),
        ("tsock_pipeline_set_index_cache", c_int, [c_void_p, c_char_p]),
        ("tsock_pipeline_set_entry_points", c_int, [c_void_p, c_uint64]),
        ("tsock_pipeline_set_shard_options", c_int, [c_void_p, c_char_p, c_char_p]),
        ("tsock_pipeline_open", c_int, [c_void_p]),
        ("tsock_pipeline_samples", c_uint64, [c_void_p]),
        ("tsock_pipeline_shards", c_uint32, [c_void_p]),
        ("tsock_pipeline_shard_starts", c_int, [c_void_p, P(c_uint64)]),
        ("tsock_pipeline_sample_path", c_char_p, [c_void_p, c_uint64]),
        ("tsock_pipeline_add_tensors", c_int, [c_void_p, c_void_p]),
        ("tsock_pipeline_fill", c_int, [c_void_p, c_void_p]),
        ("tsock_pipeline_destroy", None, [c_void_p]),
        ("tsock_producer_set_shard_order", c_int, [c_void_p, P(c_uint64), c_uint32, c_uint32])):
    _declare_optional(_name, _res, _args)
_declare("tsock_producer_wait_consumers", c_int, [c_void_p, c_int, c_int])
_declare("tsock_producer_acquire", c_int, [c_void_p, c_int, P(c_void_p)])
_declare("tsock_slot_data", c_void_p, [c_void_p, c_int])
_declare("tsock_slot_set_epoch", c_int, [c_void_p, c_uint64, c_uint64, c_int])
_declare("tsock_producer_publish", c_int, [c_void_p, c_void_p, c_uint32])
_declare("tsock_producer_consumer_count", c_int, [c_void_p])
_declare("tsock_producer_stat", c_int, [c_void_p, c_int, c_int, P(c_uint64)])
_declare("tsock_producer_set_status", c_int, [c_void_p, c_char_p])
_declare("tsock_producer_finish", c_int, [c_void_p])
_declare("tsock_producer_destroy", None, [c_void_p])
_declare("tsock_default_endpoint", c_int, [ctypes.c_char_p, c_size_t])

# ---- consumer ----
_declare("tsock_consumer_create", c_int, [P(c_void_p), c_char_p])
_declare("tsock_consumer_set_heartbeat", c_int, [c_void_p, c_int, c_int])
_declare("tsock_consumer_set_name", c_int, [c_void_p, c_char_p])
_declare("tsock_consumer_set_batch_size", c_int, [c_void_p, c_uint32])
_declare("tsock_consumer_set_drop_last", c_int, [c_void_p, c_int])
_declare("tsock_consumer_set_epoch_grace", c_int, [c_void_p, c_int])
_declare("tsock_consumer_set_reconnect", c_int, [c_void_p, c_int])
_declare("tsock_consumer_start", c_int, [c_void_p, c_int])
_declare("tsock_consumer_cancel", None, [c_void_p])
_declare("tsock_consumer_set_checkpointing", c_int, [c_void_p, c_int])
_declare("tsock_consumer_save_state", c_int, [c_void_p, c_void_p, c_size_t, P(c_size_t)])
_declare("tsock_consumer_restore_state", c_int, [c_void_p, ctypes.c_char_p, c_size_t])
_declare("tsock_consumer_next", c_int, [c_void_p, c_int, P(c_void_p)])
_declare("tsock_consumer_release", c_int, [c_void_p, c_void_p])
_declare("tsock_consumer_release_on_stream", c_int, [c_void_p, c_void_p, c_void_p])
_declare("tsock_consumer_set_device", c_int, [c_void_p, c_int])
_declare("tsock_consumer_stat", c_int, [c_void_p, c_int, P(c_uint64)])
_declare("tsock_consumer_batch_capacity", c_uint32, [c_void_p])
_declare("tsock_consumer_slot_count", c_uint32, [c_void_p])
_declare("tsock_consumer_dataset_size", c_uint64, [c_void_p])
_declare("tsock_consumer_batches_per_epoch", c_uint64, [c_void_p])
# Leaving an epoch early, and the stream's end (docs/semantics.md): optional, so that an older
# library still serves (a DataLoader then reads the rest of an epoch left by break, as before).
_declare_optional("tsock_consumer_pause", c_int, [c_void_p])
_declare_optional("tsock_consumer_end_epoch", c_int, [c_void_p])
_declare_optional("tsock_consumer_stream_epochs", c_uint64, [c_void_p])
_declare_optional("tsock_consumer_classes", c_uint32, [c_void_p])
_declare_optional("tsock_consumer_class_name", c_char_p, [c_void_p, c_uint32])
_declare("tsock_consumer_destroy", None, [c_void_p])
# Data-parallel groups (docs/distributed.md): optional, so that a library without them still
# serves solo consumers.
_declare_optional("tsock_consumer_set_group", c_int, [c_void_p, c_char_p, c_uint32, c_uint32])
_declare_optional("tsock_consumer_set_group_timeout", c_int, [c_void_p, c_uint32])

# ---- statistics of a running producer ----
_declare("tsock_stats_query", c_int, [P(c_void_p), c_char_p, c_int])
_declare("tsock_stats_query_curve", c_int, [P(c_void_p), c_char_p, c_int, c_char_p, c_char_p])

# ---- who may connect ----
_declare("tsock_producer_set_curve", c_int, [c_void_p, c_char_p, c_char_p])
_declare("tsock_producer_set_insecure", c_int, [c_void_p, c_int])
_declare("tsock_consumer_set_curve", c_int, [c_void_p, c_char_p, c_char_p])
_declare("tsock_curve_keygen", c_int, [c_char_p, c_char_p])
_declare("tsock_stats_json", c_char_p, [c_void_p])
_declare("tsock_stats_destroy", None, [c_void_p])

# ---- batches ----
_declare("tsock_batch_samples", c_uint32, [c_void_p])
_declare("tsock_batch_seq", c_uint64, [c_void_p])
_declare("tsock_batch_epoch", c_uint64, [c_void_p])
_declare("tsock_batch_is_view", c_int, [c_void_p])
_declare("tsock_batch_index_in_epoch", c_uint64, [c_void_p])
_declare("tsock_batch_is_epoch_end", c_int, [c_void_p])
_declare("tsock_batch_tensor_count", c_int, [c_void_p])
_declare("tsock_batch_find", c_int, [c_void_p, c_char_p])
_declare("tsock_batch_tensor_name", c_char_p, [c_void_p, c_int])
_declare("tsock_batch_tensor_dtype", c_int, [c_void_p, c_int])
_declare("tsock_batch_tensor_ndim", c_int, [c_void_p, c_int])
_declare("tsock_batch_tensor_dim", c_int64, [c_void_p, c_int, c_int])
_declare("tsock_batch_tensor_bytes", c_size_t, [c_void_p, c_int])
_declare("tsock_batch_tensor_data", c_void_p, [c_void_p, c_int])
_declare("tsock_batch_tensor_device", c_int, [c_void_p, c_int])
_declare("tsock_batch_device_index", c_int, [c_void_p])
_declare("tsock_batch_wait", c_int, [c_void_p, c_void_p])

# ---- GPU ----
_declare("tsock_cuda_device_count", c_int, [])


def _check_version():
    v = lib.tsock_version()
    major, minor, patch = v // 10000, (v // 100) % 100, v % 100
    found = lib.tsock_version_string().decode("utf-8", "replace")
    if major != EXPECTED_MAJOR or minor < EXPECTED_MINOR:
        raise VersionMismatch(
            f"libtsock at {path} is version {found} ({major}.{minor}.{patch}), but this tsock "
            f"Python package was written for {EXPECTED_MAJOR}.{EXPECTED_MINOR} (it needs major "
            f"version {EXPECTED_MAJOR} and minor version {EXPECTED_MINOR} or newer). Point "
            f"TSOCK_LIBRARY at a matching libtsock.so or install a matching binding.")
    return (major, minor, patch), found


version_info, version = _check_version()


# Descriptions used when the library has none (tsock_strerror returned NULL for a code).
_FALLBACK_MESSAGES = {
    errors.E_EPOCH_INTERRUPTED: "epoch interrupted: the producer went away in the middle of "
                                "this consumer's epoch",
}


def strerror(code):
    """tsock_strerror(code) as a str."""
    text = lib.tsock_strerror(int(code))
    if text is None:
        return _FALLBACK_MESSAGES.get(int(code), f"tsock error {errors.code_name(int(code))}")
    return text.decode("utf-8", "replace")


def error(code, function=None, detail=None):
    """The exception for a negative return value `code` of C function `function`; `detail`
    (the library's log line that explains it, say) is appended to the message."""
    message = strerror(code)
    if detail:
        message = f"{message}: {detail}"
    return errors.error_class(code)(code, message, function)


def check(rc, function):
    """Returns rc when it is not negative; raises the matching TsockError otherwise."""
    if rc < 0:
        raise error(rc, function)
    return rc


# ---- logging ----
#
# One callback for the life of the process: it hands lines to the user's function (set_log)
# and keeps the last warnings and errors, so that an exception can carry the sentence the
# library logged about it (the missing ranks of a group, the field a producer refused). Lines
# at WARN and ERROR are rare; the library calls back only for levels up to the maximum set.

LOG_WARN = 1
_log_state = {"user": None, "level": -1, "seq": 0}
_recent = collections.deque(maxlen=64)  # (sequence number, text) of warnings and errors


def _trampoline(_user, level, message):
    try:
        text = message.decode("utf-8", "replace")
        if level <= LOG_WARN:
            _log_state["seq"] += 1
            _recent.append((_log_state["seq"], text))
        fn = _log_state["user"]
        if fn is not None and level <= _log_state["level"]:
            fn(level, text)
    except Exception:  # an exception cannot cross into C; drop it
        pass


_LOG_CALLBACK = LOG_FN(_trampoline)  # kept alive as long as C may call it


def set_log(fn, max_level):
    """Installs fn(level:int, message:str) as the user's log function (None: discard).

    The callback runs on the library's internal threads too; it must be quick and thread-safe.
    """
    if fn is None:
        _log_state["user"], _log_state["level"] = None, -1
    else:
        _log_state["user"], _log_state["level"] = fn, int(max_level)
    lib.tsock_set_log(_LOG_CALLBACK, None, max(_log_state["level"], LOG_WARN))


def log_mark():
    """The sequence number of the last warning or error kept (see :func:`recent_log`)."""
    return _log_state["seq"]


def recent_log(*needles, after=0):
    """The most recent warning or error line logged after mark `after` that contains one of
    `needles`, or None."""
    for seq, text in reversed(list(_recent)):
        if seq <= after:
            return None
        if any(n in text for n in needles):
            return text
    return None


def _unset_log_at_exit():
    # Library threads must not call into an interpreter that is shutting down.
    lib.tsock_set_log(LOG_FN(), None, 0)


lib.tsock_set_log(_LOG_CALLBACK, None, LOG_WARN)
atexit.register(_unset_log_at_exit)


def default_endpoint():
    """The default endpoint, "ipc://<runtime dir>/tsock/default.sock"."""
    buf = ctypes.create_string_buffer(4096)
    check(lib.tsock_default_endpoint(buf, len(buf)), "tsock_default_endpoint")
    return buf.value.decode()
