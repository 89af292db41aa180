"""The consumer side: :class:`Consumer` (one batch at a time) and :class:`DataLoader` (epochs).

Zero-copy contract: a batch's arrays are views of the producer's shared memory, mapped
read-only. They stay valid until the batch is released (the DataLoader releases it when the
next batch is requested, or at ``close()``). Never modify a batch in place; copy what you keep.
"""
import ctypes
import errno
import math
import numbers
import threading
import time
import warnings
import weakref

from . import _group, _lib, _views, errors, security
from ._dropin import _Dataset, _Sampler, _warn_ignored
from ._lib import lib


_STAT_KEYS = {
    "batches": 1,
    "samples": 2,
    "released": 3,
    "held": 4,
    "bad_messages": 8,
    "epochs": 12,
}
_STAT_WAIT_NS = 9

# Longest single wait inside the C library: between two waits Python runs its signal handlers,
# so Ctrl-C interrupts a consumer blocked on a silent producer.
_WAIT_CHUNK_MS = 200
_ETIMEDOUT = errno.ETIMEDOUT
_AGAIN = (-errno.ETIMEDOUT, -errno.EINTR)  # a wait that ended without news: wait again


def _ms(timeout):
    """Seconds (None: forever) -> milliseconds for the C API (-1: forever)."""
    if timeout is None:
        return -1
    if timeout < 0:
        raise ValueError("timeout must be >= 0 seconds, or None to wait forever")
    return int(math.ceil(timeout * 1000.0))


def _start_interruptibly(h, timeout_ms):
    """tsock_consumer_start(h, timeout_ms), which Ctrl-C interrupts.

    Python runs its signal handlers on the main thread between bytecodes, never while that
    thread is inside a C call, so a start blocked for 10 s (or forever) in the main thread
    would hold KeyboardInterrupt back until it returned. next() waits in short slices instead,
    but a start cannot be resumed after a timed-out slice (it is one handshake). So the start
    runs on a helper thread while the calling thread waits on a lock, which a signal does
    interrupt; on KeyboardInterrupt (or any exception raised by a signal handler) the waiting
    thread cancels the start (tsock_consumer_cancel, made for this), waits the moment it takes
    to return, and re-raises. A start runs once per consumer: the thread costs nothing that
    matters, unlike one per next().

    The wait is on a plain lock the helper releases when the start returned, not on
    Thread.join(): an interrupted join can mark a running thread as stopped (CPython 3.11,
    gh-90882), and the handle must never be destroyed while the start still uses it."""
    result = []
    done = threading.Lock()
    done.acquire()

    def run():
        try:
            result.append(lib.tsock_consumer_start(h, timeout_ms))
        finally:
            done.release()

    threading.Thread(target=run, name="tsock-consumer-start", daemon=True).start()
    try:
        done.acquire()
    except BaseException:
        lib.tsock_consumer_cancel(h)
        while True:  # returns at once now; further Ctrl-Cs must not cut this wait short
            try:
                done.acquire()
                break
            except BaseException:
                lib.tsock_consumer_cancel(h)
        raise
    return result[0]


class TensorInfo:
    """The layout of one tensor of the stream: name, dtype and per-sample shape."""

    __slots__ = ("index", "name", "dtype", "np_dtype", "typestr", "sample_shape", "device")

    def __init__(self, index, name, dtype, sample_shape, device):
        self.index = index
        self.name = name
        self.dtype = dtype
        self.np_dtype = _views.NUMPY_DTYPES.get(dtype)
        self.typestr = self.np_dtype.str if self.np_dtype is not None else None
        self.sample_shape = sample_shape
        self.device = device

    def __repr__(self):
        dt = lib.tsock_dtype_name(self.dtype).decode()
        dev = "cpu" if self.device == _views.DEVICE_CPU else f"device {self.device}"
        shape = ", ".join(("B",) + tuple(map(str, self.sample_shape)))
        return f"TensorInfo({self.name!r}, {dt}, [{shape}], {dev})"


class Batch:
    """One batch held by a :class:`Consumer`.

    Attributes: ``samples`` (how many samples it holds), ``epoch_end`` (it ends its epoch),
    ``is_view`` (True: a zero-copy view of one producer slot; False: gathered from several
    slots into memory the consumer owns), ``seq`` (the producer batch it starts in),
    ``epoch`` and ``index_in_epoch`` (this consumer's own epochs). The tensors are read
    with :meth:`array` (numpy) and :meth:`tensor` (torch); both are zero-copy views valid until
    :meth:`release`.
    """

    __slots__ = ("_consumer", "_ptr", "samples", "epoch_end", "is_view", "_seq", "_epoch",
                 "_index", "_waited", "_readers", "__weakref__")

    def __init__(self, consumer, ptr):
        self._consumer = consumer
        self._ptr = ptr
        self.samples = lib.tsock_batch_samples(ptr)
        self.epoch_end = lib.tsock_batch_is_epoch_end(ptr) != 0
        self.is_view = lib.tsock_batch_is_view(ptr) != 0
        if self.is_view:
            consumer._views_count += 1
        else:
            consumer._gathers_count += 1
        self._seq = None  # read on first use (or by Consumer.next): ctypes calls cost ~1 us
        self._waited = None  # GPU batches: the stream made to wait for the batch last
        self._readers = None  # GPU batches: every torch stream it was read on, by handle

    def _load_meta(self):
        ptr = self._ptr
        if ptr is None:
            raise ValueError("the batch was released before its epoch information was read")
        self._seq = lib.tsock_batch_seq(ptr)
        self._epoch = lib.tsock_batch_epoch(ptr)
        self._index = lib.tsock_batch_index_in_epoch(ptr)

    @property
    def seq(self):
        """The sequence number of the producer batch this batch starts in, from 0."""
        if self._seq is None:
            self._load_meta()
        return self._seq

    @property
    def epoch(self):
        """This consumer's epoch, from 0 (in free mode: the producer's epoch mark)."""
        if self._seq is None:
            self._load_meta()
        return self._epoch

    @property
    def index_in_epoch(self):
        """Position of this batch in its epoch, from 0."""
        if self._seq is None:
            self._load_meta()
        return self._index

    @property
    def released(self):
        return self._ptr is None

    @property
    def layout(self):
        return self._consumer.layout

    def _info(self, key):
        layout = self._consumer.layout
        if isinstance(key, str):
            for info in layout:
                if info.name == key:
                    return info
            raise KeyError(f"this stream has no tensor {key!r}; it has "
                           f"{[i.name for i in layout]}")
        return layout[key]

    def array(self, key):
        """Tensor `key` (a name or an index) as a read-only numpy array (zero-copy, host only)."""
        return self._consumer._view(self, self._info(key), False)

    def tensor(self, key):
        """Tensor `key` as a torch tensor sharing the batch's memory (zero-copy)."""
        if _views.get_torch() is None:
            raise ImportError("Batch.tensor() needs torch (not importable, or TSOCK_NO_TORCH "
                              "is set); use Batch.array()")
        return self._consumer._view(self, self._info(key), True)

    def arrays(self):
        """Every tensor as a dict name -> numpy array (zero-copy)."""
        return {info.name: self._consumer._view(self, info, False)
                for info in self._consumer.layout}

    def release(self):
        """Gives the slot back to the producer. The batch's views are invalid afterwards.
        Releasing twice does nothing."""
        if self._ptr is not None:
            self._consumer.release(self)

    def __repr__(self):
        if self._ptr is None and self._seq is None:
            return f"<tsock.Batch samples={self.samples} released>"
        state = "released" if self._ptr is None else "held"
        return (f"<tsock.Batch seq={self.seq} epoch={self.epoch} index={self.index_in_epoch}"
                f"{' end' if self.epoch_end else ''} samples={self.samples}"
                f"{'' if self.is_view else ' gathered'} {state}>")


class _Mapping:
    """Stands for a consumer's mapping of the ring: every array on it keeps this alive, and
    the C consumer is destroyed (the ring unmapped) when it goes, unless close() came first."""

    __slots__ = ("__weakref__",)


class Consumer:
    """A connection to a tsock producer, batch by batch.

    ``Consumer(endpoint=None, timeout=10.0, name=None, heartbeat=None, batch_size=None,
    drop_last=False, epoch_grace=None, reconnect=None)`` connects right away (waiting up to
    `timeout` seconds for the producer to answer; the producer may start later within that
    time). `heartbeat` is ``(interval_s, timeout_s)``: the producer silence after which calls
    fail with :class:`tsock.ProducerLost` (library default: 0.25 s and 3 s).

    `batch_size` is this consumer's own batch size (None: the producer's); batches that lie
    inside one producer batch are zero-copy views, others are gathered (``Batch.is_view``).
    `drop_last` drops the short last batch of each epoch (needs a producer sampler:
    ValueError otherwise). `epoch_grace` (seconds, None: library default 0.1) is how long a
    consumer may wait between epochs before it is paused. `reconnect` (seconds, None or 0:
    off) waits that long for a producer to come back on the endpoint when it dies or stops;
    the epoch cut short raises :class:`tsock.EpochInterrupted` once. `curve` is ``(client
    secret key file, producer public key file)`` for a producer that requires CURVE keys
    (docs/security.md); when the producer refuses the handshake (key not listed, another
    server key, or keys on one side only) the connection fails with TsockError E_AUTH.
    `checkpointing=True` makes :meth:`save_state` work (needs a producer sampler); `state` (bytes from
    :meth:`save_state`) restores a saved position and implies it: the consumer receives exactly
    the rest of the interrupted epoch, then normal epochs (docs/semantics.md, "Resume").
    `group`, `rank`, `world_size`, `group_timeout`: this consumer is rank `rank` of the
    data-parallel group `group` of `world_size` ranks, resolved as :class:`DataLoader` does
    (``self.group`` is the result, None for a solo consumer).

    :meth:`next` returns a :class:`Batch`; :meth:`release` gives it back. Most training code
    wants :class:`DataLoader` instead.
    """

    def __init__(self, endpoint=None, timeout=10.0, name=None, heartbeat=None, batch_size=None,
                 drop_last=False, epoch_grace=None, reconnect=None, device=None, curve=None,
                 checkpointing=False, state=None, group=None, rank=None, world_size=None,
                 group_timeout=None):
        self._h = None
        curve_secret, curve_server = security.key_pair(curve, "curve")
        membership = _group.resolve(group, rank, world_size, group_timeout)
        self.group = membership
        self._log_mark = _lib.log_mark()
        if membership is not None:
            _lib.require("tsock_consumer_set_group", "group=")
        if state is not None and not isinstance(state, (bytes, bytearray)):
            raise TypeError(f"state must be bytes from save_state(), not {type(state).__name__}")
        cuda_index = _cuda_index(device)
        self._views_count = 0
        self._gathers_count = 0
        self._pending = 0  # an error code met by _poll, raised by the next _next
        self._pushback = None  # a batch _interruption_cause polled, handed out by the next _next
        if batch_size is not None:
            if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size <= 0:
                raise ValueError(f"batch_size must be a positive integer or None, not "
                                 f"{batch_size!r}")
            if batch_size > 0xFFFFFFFF:
                raise ValueError(f"batch_size {batch_size} is too large")
        if epoch_grace is not None:
            _ms(epoch_grace)
        if reconnect is not None:
            _ms(reconnect)
        self._finalizer = None
        self.layout = None
        self._held = {}
        self._cache = {}  # (tensor index, address, samples) -> _views.CachedView
        h = ctypes.c_void_p()
        ep = endpoint.encode() if isinstance(endpoint, str) else endpoint
        _lib.check(lib.tsock_consumer_create(ctypes.byref(h), ep), "tsock_consumer_create")
        self._h = h.value
        # Destroying releases every held batch, says goodbye and unmaps the ring: run it on
        # close(), or when neither this object nor any array on the ring is left (arrays keep
        # the _Mapping token alive, not this object: no reference cycle), or at interpreter
        # exit, whichever comes first, exactly once.
        self._mapping = _Mapping()
        self._finalizer = weakref.finalize(self._mapping, lib.tsock_consumer_destroy, self._h)
        try:
            if name is not None:
                _lib.check(lib.tsock_consumer_set_name(self._h, name.encode()),
                           "tsock_consumer_set_name")
            if curve_secret is not None:
                security.check(lib.tsock_consumer_set_curve(self._h, curve_secret, curve_server),
                               "tsock_consumer_set_curve", (curve_secret, curve_server))
            if heartbeat is not None:
                interval, hb_timeout = heartbeat
                _lib.check(lib.tsock_consumer_set_heartbeat(self._h, _ms(interval),
                                                            _ms(hb_timeout)),
                           "tsock_consumer_set_heartbeat")
            if batch_size is not None:
                _lib.check(lib.tsock_consumer_set_batch_size(self._h, int(batch_size)),
                           "tsock_consumer_set_batch_size")
            if drop_last:
                _lib.check(lib.tsock_consumer_set_drop_last(self._h, 1),
                           "tsock_consumer_set_drop_last")
            if epoch_grace is not None:
                _lib.check(lib.tsock_consumer_set_epoch_grace(self._h, _ms(epoch_grace)),
                           "tsock_consumer_set_epoch_grace")
            if reconnect:
                _lib.check(lib.tsock_consumer_set_reconnect(self._h, _ms(reconnect)),
                           "tsock_consumer_set_reconnect")
            if cuda_index is not None:
                _lib.check(lib.tsock_consumer_set_device(self._h, cuda_index),
                           "tsock_consumer_set_device")
            if membership is not None:
                _lib.check(lib.tsock_consumer_set_group(self._h, membership.name.encode(),
                                                        membership.rank,
                                                        membership.world_size),
                           "tsock_consumer_set_group")
                if membership.timeout_ms is not None:
                    _lib.require("tsock_consumer_set_group_timeout", "group_timeout=")
                    _lib.check(lib.tsock_consumer_set_group_timeout(self._h,
                                                                    membership.timeout_ms),
                               "tsock_consumer_set_group_timeout")
            if state is not None:
                _lib.check(lib.tsock_consumer_restore_state(self._h, bytes(state), len(state)),
                           "tsock_consumer_restore_state")
            elif checkpointing:
                _lib.check(lib.tsock_consumer_set_checkpointing(self._h, 1),
                           "tsock_consumer_set_checkpointing")
            rc = _start_interruptibly(self._h, _ms(timeout))
            if rc == -errno.ENOTSUP and checkpointing:
                raise ValueError(
                    "checkpointing=True needs a producer with a sampler (tsock-producer always "
                    "has one): this producer publishes its own batches (free mode), whose "
                    "epochs cannot be resumed exactly") from _lib.error(rc, "tsock_consumer_start")
            if rc == -errno.EINVAL and drop_last:
                raise ValueError(
                    "drop_last=True needs a producer with a sampler (tsock-producer always has "
                    "one): this producer publishes its own batches (free mode), where the "
                    "library cannot know an epoch's last batch in advance; pass "
                    "drop_last=False") from _lib.error(rc, "tsock_consumer_start")
            if rc < 0:
                raise self._start_error(rc, endpoint, timeout)
        except BaseException:
            self.close()
            raise
        self.endpoint = endpoint
        self.drop_last = bool(drop_last)
        #: The producer's batch size (the slot capacity).
        self.producer_batch_size = lib.tsock_consumer_batch_capacity(self._h)
        #: This consumer's batch size.
        self.batch_size = int(batch_size) if batch_size is not None else self.producer_batch_size
        self.slots = lib.tsock_consumer_slot_count(self._h)
        self._next_out = ctypes.c_void_p()
        self._next_ref = ctypes.byref(self._next_out)
        #: Whether :meth:`save_state` works (checkpointing=True, or restored from a state).
        self.checkpointing = bool(checkpointing) or state is not None

    def save_state(self):
        """This consumer's position as bytes: the epoch in progress and the samples of it that
        :meth:`next` returned so far (released or not). Small: at most about one bit per sample
        plus 53 bytes. Call it between :meth:`next` calls; needs ``checkpointing=True``."""
        if not self.checkpointing:
            raise ValueError("save_state() needs a consumer created with checkpointing=True "
                             "(or restored from a state)")
        size = ctypes.c_size_t(0)
        rc = lib.tsock_consumer_save_state(self._h, None, 0, ctypes.byref(size))
        if rc != -errno.ENOSPC:
            _lib.check(rc, "tsock_consumer_save_state")
        buf = ctypes.create_string_buffer(size.value)
        _lib.check(lib.tsock_consumer_save_state(self._h, buf, size.value, ctypes.byref(size)),
                   "tsock_consumer_save_state")
        return buf.raw[:size.value]

    # ---- batches ----

    def next(self, timeout=10.0):
        """The next batch, waiting up to `timeout` seconds (None: forever).

        Raises :class:`tsock.Timeout`, :class:`tsock.EndOfStream` (the producer finished and
        every batch was delivered), :class:`tsock.ProducerLost` (the producer died: within the
        heartbeat timeout), :class:`tsock.ProducerStopped`, or another TsockError.
        """
        batch = self._next(timeout)
        batch._load_meta()
        return batch

    def _next(self, timeout):
        """next() without reading the epoch information (the DataLoader reads it only where
        it needs it)."""
        h = self._h
        if h is None:
            raise ValueError("the consumer is closed")
        batch = self._pushback
        if batch is not None:
            self._pushback = None
            return batch
        rc = self._pending
        if rc:  # an error a poll met (some, like TSOCK_E_EPOCH_INTERRUPTED, come once)
            self._pending = 0
            raise self._error(rc, "tsock_consumer_next")
        total = _ms(timeout)
        chunk = _WAIT_CHUNK_MS if total < 0 else min(total, _WAIT_CHUNK_MS)
        rc = lib.tsock_consumer_next(h, chunk, self._next_ref)
        if rc < 0:
            if rc in _AGAIN and chunk != total:  # keep waiting, in chunks
                rc = self._wait_more(total - chunk if total >= 0 else -1)
            if rc < 0:
                raise self._error(rc, "tsock_consumer_next")
        ptr = self._next_out.value
        if self.layout is None:
            self.layout = self._read_layout(ptr)
        batch = Batch(self, ptr)
        self._held[ptr] = batch
        return batch

    def _where(self, endpoint=None):
        """The endpoint, as an error message names it."""
        endpoint = getattr(self, "endpoint", None) if endpoint is None else endpoint
        if endpoint is None:
            try:
                return f"{_lib.default_endpoint()} (the default endpoint)"
            except Exception:
                return "the default endpoint"
        return endpoint.decode() if isinstance(endpoint, bytes) else str(endpoint)

    def _start_error(self, rc, endpoint, timeout):
        """The exception for a failed start, naming the endpoint and what to start or check."""
        where = self._where(endpoint)
        if rc == -errno.ETIMEDOUT:
            wait = "" if timeout is None else f" within {timeout} s"
            return errors.Timeout(
                rc, f"no tsock producer answered at {where}{wait}: start one there "
                f"(tsock-producer --dataset ... --endpoint {where.split(' ')[0]}, or "
                f"tsock.ensure_producer(...)), or check that the producer serves this endpoint "
                f"(its first log line names it; tsock-stat --endpoint ... asks it)",
                "tsock_consumer_start")
        err = self._error(rc, "tsock_consumer_start")
        err.message = f"{err.message} (producer endpoint {where})"
        err.args = (err.code, err.message)
        return err

    def _end_error(self, err):
        """EndOfStream, saying how many epochs the producer served and how to serve more."""
        epochs = None
        if self._h is not None and hasattr(lib, "tsock_consumer_stream_epochs"):
            epochs = lib.tsock_consumer_stream_epochs(self._h)
        served = f"after {epochs} epochs" if epochs else "after the epochs it was started with"
        err.message = (f"the producer at {self._where()} finished its stream {served}; "
                       f"tsock-producer serves --epochs N epochs, and by default (--epochs 0) "
                       f"until stopped: restart it without --epochs, or with more")
        err.args = (err.code, err.message)
        return err

    # Codes whose explanation the library logs rather than returns: the exception carries it.
    _EXPLAINED = tuple(getattr(errors, name) for name in (
        "E_GROUP_INCOMPLETE", "E_GROUP_LOST", "E_GROUP_MISMATCH", "E_REJECTED")
        if hasattr(errors, name))

    def _error(self, rc, function):
        """The exception for return code `rc`, with the line the library logged about it
        (for a group: the missing or lost ranks, or the field the producer refused)."""
        detail = None
        if rc in self._EXPLAINED:
            needles = ["the producer refused this consumer"]
            if self.group is not None:
                needles.append(f"group '{self.group.name}'")
            detail = _lib.recent_log(*needles, after=self._log_mark)
        err = _lib.error(rc, function, detail)
        if isinstance(err, errors.EndOfStream):
            return self._end_error(err)
        if isinstance(err, (errors.ProducerLost, errors.ProducerStopped)):
            err.message = f"{err.message} (producer endpoint {self._where()})"
            err.args = (err.code, err.message)
        return err

    def _pause(self):
        """Stops receiving until the next read (tsock_consumer_pause): the batches sent and not
        read go back, so other jobs never wait for this one. Returns False where the library
        cannot (older library, a group rank, free mode)."""
        if self._h is None or not hasattr(lib, "tsock_consumer_pause"):
            return False
        return lib.tsock_consumer_pause(self._h) == 0

    def _end_epoch(self):
        """Gives up the rest of the epoch (tsock_consumer_end_epoch). False where the library
        cannot: the caller then reads the rest and drops it."""
        if self._h is None or not hasattr(lib, "tsock_consumer_end_epoch"):
            return False
        return lib.tsock_consumer_end_epoch(self._h) == 0

    def _interruption_cause(self):
        """After TSOCK_E_EPOCH_INTERRUPTED in a group: the library reports TSOCK_E_GROUP_LOST
        on the very next call when a lost rank was the cause. Returns that exception (with
        the lost ranks), or None when the cause was something else (the producer went away);
        a batch met instead is kept for the next call."""
        batch = self._poll()
        if batch is not None:
            self._pushback = batch
            return None
        rc = self._pending
        if rc and rc == getattr(errors, "E_GROUP_LOST", None):
            return self._error(rc, "tsock_consumer_next")
        return None

    def _poll(self):
        """The next batch if one is there already, else None (errors included: the blocking
        next() that follows reports them)."""
        if self._pushback is not None:
            batch, self._pushback = self._pushback, None
            return batch
        if self._h is None or self._pending:
            return None
        rc = lib.tsock_consumer_next(self._h, 0, self._next_ref)
        if rc < 0:
            if rc not in _AGAIN:
                self._pending = rc
            return None
        ptr = self._next_out.value
        batch = Batch(self, ptr)
        self._held[ptr] = batch
        return batch

    def _wait_more(self, remaining_ms):
        deadline = None if remaining_ms < 0 else time.monotonic() + remaining_ms / 1000.0
        while True:
            if deadline is None:
                chunk = _WAIT_CHUNK_MS
            else:
                chunk = min(_WAIT_CHUNK_MS, max(0, int((deadline - time.monotonic()) * 1000)))
            rc = lib.tsock_consumer_next(self._h, chunk, self._next_ref)
            if rc not in _AGAIN:
                return rc
            if deadline is not None and time.monotonic() >= deadline:
                return -_ETIMEDOUT

    def release(self, batch):
        """Gives `batch` back so its slot can be refilled; its views are invalid afterwards.

        A batch in GPU memory is released stream-ordered on torch's current stream (of the
        batch's device): the slot is refilled only after the work queued on that stream so far,
        which includes the training step that read it, has finished. This call never blocks."""
        ptr = batch._ptr
        if ptr is None:
            return
        on_gpu = self.layout is not None and self.layout[0].device == _views.DEVICE_CUDA
        if self._h is not None:
            # The C call first: a release that fails (a fence that cannot be armed, say) leaves
            # the batch held, so the caller may retry it and the slot is not lost.
            if on_gpu:
                stream = self._release_stream(batch)
                _lib.check(lib.tsock_consumer_release_on_stream(self._h, ptr, stream),
                           "tsock_consumer_release_on_stream")
            else:
                _lib.check(lib.tsock_consumer_release(self._h, ptr), "tsock_consumer_release")
        batch._ptr = None
        batch._readers = None
        del self._held[ptr]

    def _release_stream(self, batch):
        """The stream a GPU batch is released on: torch's current stream, made to wait first
        for every other stream that read the batch (a step under ``torch.cuda.stream(side)``),
        so the slot is refilled only after all of them are done with it."""
        torch = _views.get_torch()
        if torch is None:
            return None
        current = torch.cuda.current_stream(lib.tsock_batch_device_index(batch._ptr))
        for reader in (batch._readers or {}).values():
            if reader.cuda_stream != current.cuda_stream:
                current.wait_stream(reader)
        return current.cuda_stream or None

    def _device_view(self, batch, info, as_torch):
        """Tensor `info` of a batch in GPU memory: a torch CUDA tensor on the slot (zero-copy),
        after making torch's current stream wait for the producer's copy of the batch."""
        if not as_torch:
            raise TypeError(f"tensor {info.name!r} is in GPU memory: read it as a torch tensor "
                            f"(Batch.tensor, DataLoader output='torch'); numpy arrays cannot "
                            f"hold device memory")
        if _views.get_torch() is None:
            raise ImportError("a batch in GPU memory is read as torch tensors, and torch is not "
                              "importable (or TSOCK_NO_TORCH is set)")
        ptr = batch._ptr
        device = lib.tsock_batch_device_index(ptr)
        reader = _views.get_torch().cuda.current_stream(device)
        stream = reader.cuda_stream or None
        if batch._waited != (stream or 0):
            _lib.check(lib.tsock_batch_wait(ptr, stream), "tsock_batch_wait")
            batch._waited = stream or 0
        # Every stream that reads the batch is waited for before its slot is refilled.
        if batch._readers is None:
            batch._readers = {}
        batch._readers[stream or 0] = reader
        address = lib.tsock_batch_tensor_data(ptr, info.index)
        return _views.device_tensor(address, (batch.samples,) + info.sample_shape,
                                    info.np_dtype, info.dtype == _views.BFLOAT16, self._mapping,
                                    device)

    def _read_layout(self, ptr):
        layout = []
        for t in range(lib.tsock_batch_tensor_count(ptr)):
            ndim = lib.tsock_batch_tensor_ndim(ptr, t)
            shape = tuple(int(lib.tsock_batch_tensor_dim(ptr, t, d)) for d in range(1, ndim))
            layout.append(TensorInfo(t, lib.tsock_batch_tensor_name(ptr, t).decode(),
                                     lib.tsock_batch_tensor_dtype(ptr, t), shape,
                                     lib.tsock_batch_tensor_device(ptr, t)))
        return tuple(layout)

    def _view(self, batch, info, as_torch):
        """A zero-copy view of tensor `info` of `batch` (numpy, or torch when as_torch).

        A view is fully determined by (address, shape, dtype), and the ring stays mapped at
        the same address until close(), so the base array (and torch tensor) for each
        (tensor, address, sample count) is built once and cached; every call returns a fresh
        view object of it (numpy .view(), torch .detach()): about 0.2 and 1 us instead of
        the 2 and 4 us of building them from scratch.
        """
        ptr = batch._ptr
        if ptr is None:
            raise ValueError("the batch was released; its memory may already hold another batch")
        if info.device == _views.DEVICE_CUDA:
            return self._device_view(batch, info, as_torch)
        address = lib.tsock_batch_tensor_data(ptr, info.index)
        key = (info.index, address, batch.samples)
        entry = self._cache.get(key)
        if entry is None:
            entry = self._cache_entry(key, info, address, batch.samples)
        if as_torch:
            tensor = entry.tensor
            if tensor is None:
                tensor = entry.make_tensor(info.dtype == _views.BFLOAT16)
            return tensor.detach()
        return entry.array.view()

    def _cache_entry(self, key, info, address, samples):
        shape = (samples,) + info.sample_shape
        if info.device != _views.DEVICE_CPU:
            raise NotImplementedError(f"tsock device {info.device} is not known to this binding")
        if info.np_dtype is None:
            raise TypeError(f"tensor {info.name!r} has dtype code {info.dtype}, unknown to "
                            f"this binding")
        if not address:
            raise errors.TsockError(-errno.EINVAL, f"no data for tensor {info.name!r}",
                                    "tsock_batch_tensor_data")
        if len(self._cache) >= 4096:  # free mode with ever-changing sample counts
            self._cache.clear()
        entry = self._cache[key] = _views.CachedView(
            _views.host_array(address, shape, info.np_dtype, self._mapping))
        return entry

    # ---- statistics and lifetime ----

    def stats(self):
        """This consumer's own figures, as a dict: ``batches`` and ``samples`` received (at
        this consumer's batch size), ``epochs`` completed, ``wait_s`` (seconds blocked waiting
        for batches, a wait in progress included), ``released``, ``held`` now,
        ``bad_messages``, and ``views`` / ``gathers`` (batches received as zero-copy views of
        a slot / gathered from several slots). The consumer also reports batches, samples,
        epochs and wait_s to its producer, where ``tsock-stat`` and :func:`tsock.query_stats`
        show them."""
        if self._h is None:
            raise ValueError("the consumer is closed")
        out = {}
        value = ctypes.c_uint64()
        for name, key in _STAT_KEYS.items():
            _lib.check(lib.tsock_consumer_stat(self._h, key, ctypes.byref(value)),
                       "tsock_consumer_stat")
            out[name] = value.value
        _lib.check(lib.tsock_consumer_stat(self._h, _STAT_WAIT_NS, ctypes.byref(value)),
                   "tsock_consumer_stat")
        out["wait_s"] = value.value / 1e9
        out["views"] = self._views_count
        out["gathers"] = self._gathers_count
        return out

    @property
    def dataset_size(self):
        """Samples per epoch (the producer sampler's dataset size); 0 in free mode."""
        if self._h is None:
            raise ValueError("the consumer is closed")
        return lib.tsock_consumer_dataset_size(self._h)

    @property
    def classes(self):
        """The producer's class names, label i named classes[i] (ImageFolder's: its folder
        names sorted), as a tuple; None when the producer announced none."""
        if self._h is None:
            raise ValueError("the consumer is closed")
        if not hasattr(lib, "tsock_consumer_classes"):
            return None
        n = lib.tsock_consumer_classes(self._h)
        if n == 0:
            return None
        return tuple(lib.tsock_consumer_class_name(self._h, i).decode("utf-8")
                     for i in range(n))

    @property
    def batches_per_epoch(self):
        """Batches in one of this consumer's epochs at its batch size (drop_last counted);
        0 in free mode."""
        if self._h is None:
            raise ValueError("the consumer is closed")
        return lib.tsock_consumer_batches_per_epoch(self._h)

    @property
    def closed(self):
        return self._h is None

    def close(self):
        """Releases every held batch, says goodbye to the producer and unmaps the ring.

        Arrays of this consumer's batches point into unmapped memory afterwards: touching
        them crashes the process. A ResourceWarning is issued when some are still alive.
        """
        if self._h is None:
            return
        on_gpu = self.layout is not None and self.layout[0].device == _views.DEVICE_CUDA
        for batch in list(self._held.values()):
            if on_gpu and batch._ptr is not None:
                # Stream-ordered, after every stream that read the batch: the library then
                # waits for these releases before it says goodbye and unmaps the ring. One that
                # fails is released at once by the library's destroy.
                try:
                    self.release(batch)
                except errors.TsockError:
                    pass
            batch._ptr = None
        self._held.clear()
        alive = sum(entry.views_alive() for entry in self._cache.values())
        self._cache.clear()
        self._h = None
        self._finalizer()
        if alive:
            warnings.warn(
                f"tsock: arrays of {alive} tensor(s) of this consumer's batches are still alive "
                f"after close(); they point into unmapped memory now. Copy (numpy .copy(), torch "
                f".clone()) the data you keep beyond a batch's lifetime.",
                ResourceWarning, stacklevel=3)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "closed" if self._h is None else f"batch_size={self.batch_size} slots={self.slots}"
        return f"<tsock.Consumer {self.endpoint!r} {state}>"


def _cuda_index(device):
    """A device argument as tsock_consumer_set_device takes it: None for the host (or no
    preference), -1 for "cuda" (the producer's own GPU), N for "cuda:N" or torch.device."""
    if device is None:
        return None
    kind = getattr(device, "type", None)
    index = getattr(device, "index", None) if kind is not None else None
    if kind is None:
        text = str(device)
        kind, _, rest = text.partition(":")
        if rest:
            if not rest.isdigit():
                raise ValueError(f"bad device {device!r}: expected 'cpu', 'cuda' or 'cuda:N'")
            index = int(rest)
    if kind == "cpu" and index is None:
        return None
    if kind == "cuda":
        return -1 if index is None else int(index)
    raise ValueError(f"unknown device {device!r}: tsock knows 'cpu', 'cuda' and 'cuda:N'")


def _resolve_device(device):
    """None or a CPU device -> None; "cuda", "cuda:N" or a torch.device -> that device."""
    if _cuda_index(device) is None:
        return None
    return device


class DataLoader:
    """Batches from a tsock producer, one epoch per iteration, like torch.utils.data.DataLoader.

    ``for images, labels in tsock.DataLoader(endpoint): ...``

    Arguments:
        endpoint: the producer's ZeroMQ endpoint (None: the default per-user endpoint).
        batch_size: this job's batch size, any positive int (None: the producer's). Batches
            inside one producer batch are zero-copy views; others are gathered (a copy).
        device: None or "cpu": tensors in host memory. "cuda" or "cuda:N" (or a torch.device):
            torch CUDA tensors. With a producer whose ring is on a GPU (tsock-producer
            --device cuda) they are zero-copy views of the ring, ready on torch's current
            stream (which is made to wait for the producer's copy), and each batch is released
            stream-ordered on that stream when the next one is requested; "cuda" uses the
            producer's GPU, "cuda:N" GPU N (peer access). With a host ring they are copied to
            the device. Needs output="torch".
        drop_last: leave out the last batch of an epoch when it is short (done by the
            library; needs a producer sampler, which tsock-producer always has: ValueError
            with a producer that publishes its own batches).
        timeout: seconds to wait for one batch (and for the producer at connection); None:
            forever. A dead producer is detected within the heartbeat timeout whatever this is.
        return_ids: items are (images, labels, ids), ids being the producer's "index" tensor.
        name: a name shown in the producer's statistics.
        samples: the dataset size, so that len() is known before the first epoch ended.
        names: which tensors to yield, in order (default: ("image", "label") when the stream
            has both, else every tensor in layout order).
        output: "torch" or "numpy" (default: torch when it is installed and TSOCK_NO_TORCH is
            not set, else numpy).
        heartbeat: (interval_s, timeout_s) for producer liveness (library default 0.25, 3).
        epoch_grace: seconds this job may spend between two epochs (validation, checkpoints)
            before it is paused and stops holding the producer back (None: library default,
            0.1 s). A paused job rejoins with a fresh, complete epoch.
        reconnect: seconds to wait for a producer to come back on the endpoint when it dies
            or stops (None or 0: off, the producer's loss raises). The epoch cut short ends
            its ``for`` loop early and sets ``last_epoch_interrupted``; the next ``for``
            reads a complete epoch from the new producer.
        curve: (client secret key file, producer public key file) to connect to a producer
            that requires CURVE keys (docs/security.md; keys from tsock.curve_keygen or
            tsock-keygen). None: no authentication (ipc endpoints, loopback tcp).
        checkpointing: make :meth:`state_dict` work (needs a producer sampler, which
            tsock-producer always has). The producer then sends this job each batch's sample
            ids (4 bytes a sample) and the job keeps a bitmap of the current epoch's.
        group: the name of the data-parallel group (DDP job) this process is a rank of
            (1 to 64 bytes of UTF-8, no control characters), or None for a job of its own.
            The ranks of a group share each epoch as DistributedSampler does: disjoint
            shards, together every sample once, the tail padded by repeating samples (or
            dropped with drop_last), the same number of batches on every rank. Each rank
            connects to its own node's producer.
        rank, world_size: this process's rank and the group's size. None: from
            torch.distributed when it is initialised, else torchrun's RANK and WORLD_SIZE,
            else Slurm's SLURM_PROCID and SLURM_NTASKS; an argument given wins over them.
            ValueError when nothing gives them, or 0 <= rank < world_size does not hold.
            A process that torch.distributed or torchrun's / Slurm's environment makes one of
            several ranks (WORLD_SIZE > 1) must say which: group='name', or group=False for
            a job of its own that sees every sample (else ValueError: each rank would train
            every sample world_size times per epoch, silently).
        group_timeout: seconds the ranks wait for each other at the group's start (None: the
            library's 600 s); then tsock.GroupIncomplete names the missing ranks.
        collate_fn: applied to each batch in this job, as torch's DataLoader applies it: it
            receives the batch as a list of per-sample tuples (views of the batch), so
            functions built on default_collate (mixup, cutmix) work unchanged; what it
            returns is what the loop gets (a copy when it stacks).
        num_workers, pin_memory, shuffle, sampler, prefetch_factor, persistent_workers:
            torch.utils.data.DataLoader arguments that a shared loader has no use for:
            accepted, warned about once, and ignored.

    Attributes training scripts read: ``dataset`` (``len()``, ``classes``, ``class_to_idx``
    from the producer), ``batch_size``, ``drop_last``, ``sampler`` (``set_epoch``).

    Groups: ``len()`` is the per-rank batch count, the same on every rank. An epoch a rank
    cannot finish (another rank of the group died: tsock.GroupLost, or the producer went away:
    tsock.EpochInterrupted) raises instead of ending the ``for`` loop early, since ranks that
    stopped at different batches would leave DDP's collectives waiting. ``set_epoch(e)`` is
    accepted for DistributedSampler compatibility and changes nothing (see :meth:`set_epoch`).

    Checkpoints, like torchdata's StatefulDataLoader: ``loader.state_dict()`` (between two
    batches, typically beside ``model.state_dict()`` in the dict given to ``torch.save``) is a
    plain dict ``{"version": 1, "state": bytes}``; on restart, ``loader.load_state_dict(sd)``
    before iterating makes the next ``for`` loop yield exactly the batches of the interrupted
    epoch that had not been yielded (sample sets; epoch numbers and batch indices continue),
    then normal epochs follow. Batches yielded after the last ``state_dict()`` are the only
    ones a crash makes the job see twice (docs/semantics.md, "Resume").

    Iterating yields the batches up to and including the next one flagged as ending an epoch,
    then stops; the next ``iter()`` continues with the following epoch. Leaving the loop early
    (``break``, a step limit, an exception) pauses the job at once: the batches sent to it and
    not yet read go back, so other jobs on the producer never wait for it while it validates;
    the next ``iter()`` then starts a fresh, complete epoch, as torch's DataLoader does (what
    remained of the left epoch is not delivered). Reading on from the same iterator instead
    (``it = iter(loader)``; ``next(it)`` later) goes on with exactly the samples of that
    epoch not read yet. With a producer sampler (tsock-producer), every
    epoch of this job holds each sample exactly once, even when it joined in the middle of
    the producer's epoch, and ``len()`` is known from the start. In free mode (a producer
    publishing its own batches), a job joining mid-epoch gets the rest of that epoch as its
    first, short, epoch (``partial_epoch``), and ``len()`` comes from `samples` when given,
    else from the first epoch end seen (before that, len() raises TypeError, as for an
    iterable-style torch DataLoader).

    Items are views of shared memory (zero-copy): read-only numpy arrays, or torch tensors on
    them. A batch is released when the next one is requested: copy what you keep longer, and
    never modify a batch in place (the memory is mapped read-only; a write crashes).
    """

    def __init__(self, endpoint=None, batch_size=None, device=None, drop_last=False,
                 timeout=10.0, return_ids=False, name=None, samples=None, names=None,
                 output=None, heartbeat=None, epoch_grace=None, reconnect=None, curve=None,
                 checkpointing=False, group=None, rank=None, world_size=None,
                 group_timeout=None, collate_fn=None, num_workers=None, pin_memory=None,
                 shuffle=None, sampler=None, prefetch_factor=None, persistent_workers=None):
        self._consumer_obj = None
        self._deferred = False   # connect on first use (a checkpointing rank: see below)
        self._closed = False
        _ms(timeout)  # validates it before anything is imported or connected
        # Resolved once, so a reconnection (load_state_dict) keeps the same rank.
        membership = _group.resolve(group, rank, world_size, group_timeout, solo_check=True)
        for arg, value in (("num_workers", num_workers), ("pin_memory", pin_memory),
                           ("shuffle", shuffle), ("sampler", sampler),
                           ("prefetch_factor", prefetch_factor),
                           ("persistent_workers", persistent_workers)):
            if value is not None:
                _warn_ignored(arg, value)
        if collate_fn is not None and not callable(collate_fn):
            raise TypeError(f"collate_fn must be callable, not {type(collate_fn).__name__}")
        #: Applied to each batch (a list of per-sample tuples), as torch's DataLoader does.
        self.collate_fn = collate_fn
        #: ``len()``, ``classes`` and ``class_to_idx`` of the producer's dataset.
        self.dataset = _Dataset(self)
        #: ``set_epoch`` (DistributedSampler's), and ``len()``.
        self.sampler = _Sampler(self)
        self._device = _resolve_device(device)
        if output is None:
            output = "torch" if _views.get_torch() is not None else "numpy"
        if output == "torch":
            if _views.get_torch() is None:
                raise ImportError("tsock.DataLoader(output='torch') needs torch, which is not "
                                  "importable" + (" (TSOCK_NO_TORCH is set)"
                                                  if _views.torch_disabled() else ""))
        elif output != "numpy":
            raise ValueError(f"output must be 'torch' or 'numpy', not {output!r}")
        if self._device is not None and output != "torch":
            raise ValueError(f"device={device!r} yields torch CUDA tensors: it needs "
                             f"output='torch' (and torch installed)")
        if samples is not None and samples <= 0:
            raise ValueError("samples must be positive")
        self.output = output
        self.drop_last = bool(drop_last)
        self.timeout = timeout
        self.return_ids = bool(return_ids)
        self.samples = samples
        self._names = tuple(names) if names is not None else None
        self._consumer_args = dict(endpoint=endpoint, timeout=timeout, name=name,
                                   heartbeat=heartbeat, batch_size=batch_size,
                                   drop_last=drop_last, epoch_grace=epoch_grace,
                                   reconnect=reconnect, device=device,
                                   checkpointing=checkpointing, curve=curve)
        if membership is not None:
            self._consumer_args.update(group=membership.name, rank=membership.rank,
                                       world_size=membership.world_size,
                                       group_timeout=group_timeout)
        #: The group's name, None for a job of its own.
        self.group = None if membership is None else membership.name
        #: This process's rank in the group and the group's size (None without a group).
        self.rank = None if membership is None else membership.rank
        self.world_size = None if membership is None else membership.world_size
        #: Where rank and world_size came from: "arguments", "torch.distributed", "torchrun
        #: environment (RANK, WORLD_SIZE)", "Slurm environment (SLURM_PROCID, SLURM_NTASKS)".
        self.group_source = None if membership is None else membership.source
        # A checkpointing rank connects on first use rather than here: a rank that joined its
        # group fresh cannot become a restored one (the producer refuses a group that mixes
        # them), so load_state_dict() must come before the connection.
        self._deferred = membership is not None and bool(checkpointing)
        self.batch_size = batch_size
        if not self._deferred:
            self._connect()
        self._iterated = False   # a batch was yielded: too late for load_state_dict
        self._select = None      # tensor infos to yield, resolved from the first batch
        self._held = None        # the batch handed out last
        self._in_epoch = False   # an epoch was started and its end not seen yet
        self._end = None         # the EndOfStream error once the stream ended
        self._generation = 0     # bumped by each iter(): older iterators stop
        self._batches_per_epoch = None
        self.epoch = None        # this consumer's epoch number of the last batch
        self.partial_epoch = False  # free mode: the epoch began before this consumer joined
        self.last_epoch_interrupted = False  # the last epoch was cut short (reconnect)
        self.interrupted_epochs = 0  # how many epochs were cut short so far
        self._requested_epoch = None  # set_epoch's value, checked when the next epoch starts
        self._epoch_warned = False

    def _connect(self):
        self._consumer_obj = Consumer(**self._consumer_args)
        self._deferred = False
        self.batch_size = self._consumer_obj.batch_size

    @property
    def _consumer(self):
        if self._consumer_obj is None and self._deferred and not self._closed:
            self._connect()
        return self._consumer_obj

    # ---- iteration ----

    def __iter__(self):
        self._check_open()
        self._generation += 1
        self._release_held()
        if self._in_epoch:
            # A loop left early: a fresh epoch, as torch's DataLoader gives a new iterator.
            if self._end is None and self._consumer._end_epoch():
                self._in_epoch = False
            else:
                self._skip_rest_of_epoch()  # a group rank, free mode: read the rest
        self.last_epoch_interrupted = False
        self._iterated = True
        return _EpochIterator(self, self._generation)

    def set_epoch(self, epoch):
        """Accepted for compatibility with ``DistributedSampler.set_epoch``; changes nothing.

        A DistributedSampler needs it to shuffle each epoch differently on every rank alike.
        tsock's ranks need nothing of the kind: each epoch's order is fixed by the producer's
        seed and the group's own epoch count (``loader.epoch``, from 0 at the group's start),
        the same on every rank by construction. The value is recorded (``requested_epoch``)
        and compared with the epoch the next ``for`` loop yields; when they differ (a job
        resumed at epoch 5 calls ``set_epoch(5)`` while its loader starts at 0) a
        UserWarning says so once, since the two numbers then name different epochs. Raises
        TypeError / ValueError for anything but an int >= 0."""
        if isinstance(epoch, bool) or not isinstance(epoch, numbers.Integral):
            raise TypeError(f"set_epoch() takes an int, not {type(epoch).__name__}")
        if epoch < 0:
            raise ValueError(f"set_epoch() takes an epoch number >= 0, not {epoch}")
        self._requested_epoch = int(epoch)

    @property
    def requested_epoch(self):
        """The last value given to :meth:`set_epoch` (None: never called)."""
        return self._requested_epoch

    def _check_requested_epoch(self, epoch):
        wanted = self._requested_epoch
        if wanted is None or wanted == epoch or self._epoch_warned:
            return
        self._epoch_warned = True
        warnings.warn(
            f"tsock.DataLoader.set_epoch({wanted}) while the loader's next epoch is its epoch "
            f"{epoch}: set_epoch changes nothing in tsock (each epoch's order comes from the "
            f"producer's seed and the loader's own epoch count, the same on every rank), so "
            f"the two numbers name different epochs. This warning is shown once.",
            UserWarning, stacklevel=4)

    # ---- checkpoints ----

    STATE_DICT_VERSION = 1

    def state_dict(self):
        """This job's position as plain types for ``torch.save``: ``{"version": 1, "state":
        bytes}``. It covers every batch yielded so far (call it between batches). Needs
        ``checkpointing=True``.

        On a rank of a group the state is the group's: every rank must call it at the same
        step (as a DDP job does), and the states are then the same bytes; a rank may wait
        here for the other ranks' blocks of that step. The batch yielded last is given back
        first (its tensors must not be used after this call, as after the next batch), so
        that ranks waiting for each other never hold the slots the producer needs. Restored
        with any world size, the group
        receives exactly the rest of the interrupted epoch (docs/semantics.md, "Resuming a
        group")."""
        self._check_open()
        if self.group is not None:
            self._release_held()
        return {"version": self.STATE_DICT_VERSION, "state": self._consumer.save_state()}

    def load_state_dict(self, state_dict):
        """Restores a position saved by :meth:`state_dict`, before iterating: the next ``for``
        loop yields exactly the rest of the interrupted epoch. Reconnects to the producer with
        the state (implies checkpointing). Raises ValueError for a dict that is not a
        state_dict, RuntimeError once iteration began, and :class:`tsock.BadState` for a
        corrupt state or one foreign to this producer, batch size or drop_last."""
        self._check_open()
        if self._iterated:
            raise RuntimeError("load_state_dict() must be called before iterating the "
                               "DataLoader")
        if (not isinstance(state_dict, dict) or "state" not in state_dict
                or not isinstance(state_dict["state"], (bytes, bytearray))):
            raise ValueError("load_state_dict() takes the dict state_dict() returned "
                             "({'version': 1, 'state': bytes})")
        if state_dict.get("version") != self.STATE_DICT_VERSION:
            raise ValueError(f"state_dict version {state_dict.get('version')!r}; this tsock "
                             f"reads version {self.STATE_DICT_VERSION}")
        args = dict(self._consumer_args, state=bytes(state_dict["state"]))
        if self._deferred:  # a checkpointing rank, not connected yet: connect restored
            self._consumer_obj = Consumer(**args)  # a bad state leaves the loader as it was
            self._consumer_args = args
            self._deferred = False
            self.batch_size = self._consumer_obj.batch_size
            return
        if self.group is not None:
            raise RuntimeError(
                "load_state_dict() on a rank of a group must come before the loader is first "
                "used (iteration, len(), stats()) and needs checkpointing=True: this rank "
                "already joined its group fresh, and a group cannot mix fresh and restored "
                "ranks")
        fresh = Consumer(**args)  # raises BadState before the old connection is given up
        self._consumer.close()
        self._consumer_obj = fresh
        self._consumer_args["checkpointing"] = True

    def _next_item(self, it):
        if it._generation != self._generation or self.closed:
            raise StopIteration  # superseded by a newer iter(), or closed
        if it._done:
            self._release_held()
            raise StopIteration
        first = not self._in_epoch
        if self._end is not None:
            self._release_held()
            it._done = True
            if first:
                raise self._end  # the stream ended: this iter() has no epoch to give
            raise StopIteration
        # The previous batch goes back when the next is requested. When the next one is
        # already there, it is released after the new views are built: the wake-ups its
        # release sets off (service thread, producer) then overlap the caller's training step
        # instead of this call. When the next one is not there yet, it is released before
        # waiting, so a waiting consumer never sits on a slot the producer could refill.
        prev = self._held
        self._held = None
        batch = None
        if prev is not None:
            batch = self._consumer._poll()
            if batch is None:
                self._consumer.release(prev)
                prev = None
        try:
            if batch is None:
                while True:
                    try:
                        batch = self._consumer._next(self.timeout)
                        break
                    except errors.EndOfStream as e:
                        self._end = e
                        it._done = True
                        if first:
                            raise
                        self._in_epoch = False
                        raise StopIteration from None  # the stream ended inside an epoch
                    except errors.EpochInterrupted:
                        # The producer went away and another took over (reconnect on), or
                        # another rank of this group was lost.
                        self.interrupted_epochs += 1
                        if self.group is not None:
                            # Ranks cut short at different batches would leave DDP's
                            # collectives waiting: a group's interruption always raises, as
                            # tsock.GroupLost when a lost rank caused it.
                            self.last_epoch_interrupted = True
                            self._in_epoch = False
                            it._done = True
                            cause = self._consumer._interruption_cause()
                            if cause is not None:
                                raise cause from None
                            raise
                        if first:
                            continue  # nothing of that epoch was handed out: read the next
                        self.last_epoch_interrupted = True
                        self._in_epoch = False
                        it._done = True
                        raise StopIteration from None
            if first or batch.epoch_end:
                # Batches never straddle epochs: the epoch information is read where an
                # epoch starts or ends, not for every batch.
                batch._load_meta()
                if first:
                    # Only free mode has epochs that began before this consumer joined.
                    self.partial_epoch = (batch._index != 0
                                          and self._consumer.batches_per_epoch == 0)
                    self._check_requested_epoch(batch._epoch)
                self.epoch = batch._epoch
            self._in_epoch = not batch.epoch_end
            if batch.epoch_end:
                it._done = True  # the next request releases this batch and stops
                self._learn_length(batch)
            self._held = batch
            return self._item(batch)
        finally:
            if prev is not None:
                self._consumer.release(prev)

    def _item(self, batch):
        item = self._views_of(batch)
        if self.collate_fn is not None:
            return self.collate_fn(list(zip(*item)))
        return item

    def _left_loop(self, it):
        """The iterator `it` was dropped before its epoch ended (break, an exception): pause,
        so the producer never waits for this job while it does something else. The batch
        handed out last stays valid (the loop's variables may still point to it)."""
        if it._generation == self._generation and self._in_epoch and not self.closed:
            self._consumer._pause()

    def _views_of(self, batch):
        sel = self._select
        if sel is None:
            sel = self._select = self._resolve_selection()
        as_torch = self.output == "torch"
        view = self._consumer._view
        if self._device is not None and sel[0].device == _views.DEVICE_CPU:
            # A host ring and a GPU job: one copy per job, made before the batch is released.
            return tuple([view(batch, info, True).to(self._device) for info in sel])
        if len(sel) == 2:
            return (view(batch, sel[0], as_torch), view(batch, sel[1], as_torch))
        return tuple([view(batch, info, as_torch) for info in sel])

    def _resolve_selection(self):
        layout = self._consumer.layout
        by_name = {info.name: info for info in layout}
        if self._names is not None:
            names = self._names
        elif "image" in by_name and "label" in by_name:
            names = ("image", "label")
        else:
            names = tuple(info.name for info in layout)
        if self.return_ids:
            if "index" not in by_name:
                raise ValueError(
                    "return_ids=True needs an 'index' tensor (the sample ids) in the producer's "
                    f"batches; this stream has {list(by_name)}")
            names = names + ("index",)
        missing = [n for n in names if n not in by_name]
        if missing:
            raise ValueError(f"the producer's batches have no tensor {missing[0]!r}; they have "
                             f"{list(by_name)}")
        return tuple(by_name[n] for n in names)

    def _learn_length(self, batch):
        # Free mode only needs it (sampler mode knows len() up front); drop_last is done by
        # the library, so the epoch-end batch is the epoch's last one either way.
        self._batches_per_epoch = batch.index_in_epoch + 1

    def _release_held(self):
        batch = self._held
        if batch is not None:
            self._held = None
            self._consumer.release(batch)

    def _skip_rest_of_epoch(self):
        while self._in_epoch and self._end is None:
            try:
                batch = self._consumer._next(self.timeout)
            except errors.EndOfStream as e:
                self._end = e
                break
            except errors.EpochInterrupted:
                self.interrupted_epochs += 1
                break  # that epoch is over; the next call starts a new one
            self._in_epoch = not batch.epoch_end
            if batch.epoch_end:
                batch._load_meta()
                self.epoch = batch._epoch
                self._learn_length(batch)
            self._consumer.release(batch)
        self._in_epoch = False

    def __len__(self):
        if not self.closed:
            n = self._consumer.batches_per_epoch
            if n > 0:  # sampler mode: the library knows it (drop_last counted)
                return int(n)
        if self.samples is not None:
            if self.drop_last:
                return self.samples // self.batch_size
            return -(-self.samples // self.batch_size)
        if self._batches_per_epoch is None:
            raise TypeError(
                "tsock.DataLoader does not know the epoch length yet: this producer has no "
                "sampler (free mode), so it is learnt when the first epoch ends; pass "
                "samples=<dataset size> to know it from the start")
        return self._batches_per_epoch

    # ---- statistics and lifetime ----

    @property
    def consumer(self):
        """The underlying :class:`Consumer` (for its layout, slots and statistics)."""
        return self._consumer

    def stats(self):
        """Figures of this consumer (see :meth:`Consumer.stats`): batches, samples, epochs,
        wait_s (seconds blocked waiting for batches), released, held, bad_messages, views and
        gathers."""
        self._check_open()
        return self._consumer.stats()

    def _check_open(self):
        if self.closed:
            raise ValueError("the DataLoader is closed")

    def close(self):
        """Releases every batch and disconnects. Arrays handed out become invalid."""
        self._held = None
        self._closed = True
        if self._consumer_obj is not None:
            self._consumer_obj.close()

    @property
    def closed(self):
        if self._closed:
            return True
        if self._deferred:
            return False  # not connected yet (a checkpointing rank before its first use)
        return self._consumer_obj is None or self._consumer_obj.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # The loader's lifetime is the connection's: once the loader is gone nobody reads the
        # stream, and a connection kept open by a stray array would hold slots the producer
        # needs for the other consumers. Arrays still alive then point into unmapped memory.
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        if self.closed:
            return "<tsock.DataLoader closed>"
        return (f"<tsock.DataLoader {self._consumer_args['endpoint']!r} "
                f"batch_size={self.batch_size} "
                f"output={self.output}>")


class _EpochIterator:
    """One epoch of a DataLoader; stops after the epoch-end batch."""

    __slots__ = ("_loader", "_generation", "_done")

    def __init__(self, loader, generation):
        self._loader = loader
        self._generation = generation
        self._done = False

    def __iter__(self):
        return self

    def __next__(self):
        return self._loader._next_item(self)

    def __len__(self):
        return len(self._loader)

    def __del__(self):
        # CPython drops the iterator as the for loop is left (break, return, an exception).
        if not self._done:
            try:
                self._loader._left_loop(self)
            except Exception:
                pass
