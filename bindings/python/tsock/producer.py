"""The producer side: publish batches from any Python iterable to tsock consumers.

``tsock.Producer`` lets a Python data pipeline that tsock cannot run itself (a custom
``torch.utils.data.Dataset`` behind a DataLoader, a generator of numpy arrays) be shared by
several training processes: each batch is copied once into a slot of the shared ring and read
zero-copy by every consumer.
"""
import ctypes
import errno
import json
import math
import time
import weakref

import numpy as np

from . import _lib, _views, errors, security
from ._lib import lib

_PRODUCER_STATS = {
    "batches": 1, "samples": 2, "released": 3, "held": 4, "consumers": 5, "joined": 6,
    "lost": 7, "bad_messages": 8, "epochs": 12, "slots": 13, "free_slots": 14,
}
_CONSUMER_STATS = {
    "id": 11, "pid": 10, "batches": 1, "samples": 2, "released": 3, "held": 4,
    "bad_messages": 8, "lag": 16, "rate_milli": 17, "paused": 18, "consumed_batches": 19,
    "consumed_samples": 20, "epochs": 12, "wait_ns": 9,
}
_STAT_WAIT_NS = 9
_WAIT_CHUNK_MS = 200  # longest single wait in C, so Ctrl-C is handled between waits
_AGAIN = (-errno.ETIMEDOUT, -errno.EINTR)  # a wait that ended without news: wait again


def _ms(timeout):
    if timeout is None:
        return -1
    if timeout < 0:
        raise ValueError("timeout must be >= 0 seconds, or None to wait forever")
    return int(math.ceil(timeout * 1000.0))


def _is_torch_tensor(x):
    torch = _views.get_torch()
    return torch is not None and isinstance(x, torch.Tensor)


def _host_array(x):
    """(numpy array on the host, tsock dtype) for a torch tensor, numpy array or array-like.
    CUDA tensors are copied to the host; torch.bfloat16 travels as its raw 16-bit pattern."""
    if _is_torch_tensor(x):
        torch = _views.get_torch()
        t = x.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(np.uint16), _views.BFLOAT16
        if t.dtype == torch.bool:
            t = t.to(torch.uint8)
        a = t.numpy()
    else:
        a = np.asarray(x)
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    if a.dtype == np.bool_:
        a = a.view(np.uint8)
    return a, _views.tsock_dtype_of(a.dtype)


def _host_array_any(x):
    """The host numpy array of one sample's part (see _host_array)."""
    return _host_array(x)[0]


class _Tensor:
    __slots__ = ("name", "dtype", "np_dtype", "sample_shape")

    def __init__(self, name, dtype, np_dtype, sample_shape):
        self.name = name
        self.dtype = dtype
        self.np_dtype = np_dtype
        self.sample_shape = sample_shape


def _cuda_device(device):
    """None / "cpu": the ring in host shared memory; "cuda" (device 0), "cuda:N" or a
    torch.device: the ring in that GPU's memory."""
    if device is None:
        return None
    kind = getattr(device, "type", None)
    index = getattr(device, "index", None) if kind is not None else None
    if kind is None:
        kind, _, rest = str(device).partition(":")
        if rest and not rest.isdigit():
            raise ValueError(f"bad device {device!r}: expected 'cpu', 'cuda' or 'cuda:N'")
        index = int(rest) if rest else None
    if kind == "cpu" and index is None:
        return None
    if kind == "cuda":
        return 0 if index is None else int(index)
    raise ValueError(f"unknown device {device!r}: tsock knows 'cpu', 'cuda' and 'cuda:N'")


class Producer:
    """Publishes batches to tsock consumers.

    ``Producer(endpoint=None, batch_size=None, slots=8, names=None, heartbeat=None,
    timeout=None, device=None)``

    Arguments:
        endpoint: ZeroMQ endpoint to serve ("ipc:///path", "tcp://127.0.0.1:5555"); None: the
            default per-user endpoint.
        batch_size: the most samples a batch may hold (the slot size). None: the first batch's.
        slots: slots in the shared ring (2 or more); consumers drift apart by up to this many.
        names: tensor names, in batch order (default "t0", "t1", ...; dict batches use their
            keys). Name them ("image", "label") for tsock.DataLoader's defaults.
        heartbeat: (interval_s, timeout_s): consumer silence after which its slots are taken
            back (library default 0.25 s and 3 s).
        timeout: seconds to wait for a free slot before raising tsock.Timeout (None: forever).
        device: None or "cpu": the ring in host shared memory. "cuda", "cuda:N" or a
            torch.device: the ring in that GPU's memory (at most 256 slots); batches are still
            handed over from the host and copied to the GPU once for every consumer. Without a
            usable GPU the first publish (or start) raises TsockError E_NO_DEVICE.
        curve: (server secret key file, authorized keys) to require CURVE authentication
            (docs/security.md): only clients whose public key is in the authorized keys (a
            file, one key per line, or a directory of *.key files) are served.
        insecure_open_to_network: serve an endpoint other hosts or users can reach without
            keys. Without it, such an endpoint (0.0.0.0, *, a host address, SOURCE;ADDRESS, an
            abstract ipc://@NAME) raises TsockError E_INSECURE at start: anyone who reaches it
            could join, hold slots and read batches.

    A batch is a tuple (or list) of torch tensors / numpy arrays sharing their first dimension
    (the sample count, 1..batch_size), a dict name -> array, or a single array. The layout
    (names, dtypes, per-sample shapes) is taken from the first batch (or :meth:`start`); every
    later batch must match it.

    Lifetime: :meth:`finish` tells consumers the stream ended (they get tsock.EndOfStream
    after the batches already sent); :meth:`close` stops and frees everything (consumers that
    were not told the end get tsock.ProducerStopped). As a context manager it finishes on a
    normal exit and closes in any case.
    """

    def __init__(self, endpoint=None, batch_size=None, slots=8, names=None, heartbeat=None,
                 timeout=None, device=None, curve=None, insecure_open_to_network=False):
        if batch_size is not None and batch_size < 1:
            raise ValueError("batch_size must be positive")
        if slots < 2:
            raise ValueError("a ring needs 2 or more slots")
        self._endpoint_arg = endpoint
        self.batch_size = batch_size
        self.slots = slots
        self.names = tuple(names) if names is not None else None
        self.heartbeat = heartbeat
        self._curve = security.key_pair(curve, "curve")
        self.insecure_open_to_network = bool(insecure_open_to_network)
        self.timeout = timeout
        self.device = _cuda_device(device)
        self._h = None
        self._finalizer = None
        self._layout = None
        self._slot = None         # acquired and not yet published
        self._finished = False
        self.epoch = 0            # epoch of the next batch
        self.index_in_epoch = 0   # its position in that epoch
        self._slot_out = ctypes.c_void_p()

    # ---- layout and start ----

    def _split(self, batch):
        """[(name, host array, tsock dtype)] for one batch."""
        if isinstance(batch, dict):
            items = list(batch.items())
            if self.names is not None and tuple(k for k, _ in items) != self.names:
                raise ValueError(f"batch keys {[k for k, _ in items]} differ from "
                                 f"names={list(self.names)}")
        else:
            if isinstance(batch, (tuple, list)):
                elems = list(batch)
            else:
                elems = [batch]
            if self._layout is not None:
                names = tuple(t.name for t in self._layout)
                if len(names) != len(elems):
                    raise ValueError(f"a batch has {len(elems)} tensors but the stream has "
                                     f"{len(names)}: {list(names)}")
            elif self.names is not None:
                names = self.names
                if len(names) != len(elems):
                    raise ValueError(f"a batch has {len(elems)} tensors but names= gives "
                                     f"{len(names)}: {list(names)}")
            else:
                names = tuple(f"t{i}" for i in range(len(elems)))
            items = list(zip(names, elems))
        out = []
        for name, x in items:
            a, dtype = _host_array(x)
            out.append((str(name), a, dtype))
        if not out:
            raise ValueError("a batch must hold at least one tensor")
        return out

    def _layout_of(self, parts):
        layout = []
        for name, a, dtype in parts:
            if a.ndim < 1:
                raise ValueError(f"tensor {name!r} has no batch dimension (shape {a.shape})")
            layout.append(_Tensor(name, dtype, _views.NUMPY_DTYPES[dtype], tuple(a.shape[1:])))
        return layout

    def start(self, example):
        """Creates the ring for batches shaped like `example`, binds the endpoint and starts
        serving. Called by the first :meth:`publish` when not called before; call it yourself
        to :meth:`wait_consumers` before the first batch is ready."""
        self._start(example, None)

    def _start(self, example, sampler, native=None, shard_order=None):
        """start(); with `sampler` = (samples, seed, epochs) the library's sampler plans every
        slot (see :meth:`serve`); with `native` (a _pipeline.Pipeline) the layout is the
        pipeline's, and `shard_order` (starts, shards, window) orders epochs by shards."""
        if self._h is not None:
            raise errors.TsockError(errors.E_STATE, "the producer is already started", "start")
        if native is not None:
            size = native.image_size
            layout = [_Tensor("image", _views.UINT8, _views.NUMPY_DTYPES[_views.UINT8],
                              (size, size, 3)),
                      _Tensor("label", _views.INT64, _views.NUMPY_DTYPES[_views.INT64], ()),
                      _Tensor("index", _views.INT64, _views.NUMPY_DTYPES[_views.INT64], ())]
            if self.batch_size is None:
                self.batch_size = 64
        else:
            parts = self._split(example)
            layout = self._layout_of(parts)
            if self.batch_size is None:
                self.batch_size = int(parts[0][1].shape[0])
        lay = ctypes.c_void_p()
        _lib.check(lib.tsock_layout_create(ctypes.byref(lay)), "tsock_layout_create")
        try:
            if native is not None:
                native.add_tensors(lay)
            for t in layout if native is None else ():
                shape = (ctypes.c_int64 * max(1, len(t.sample_shape)))(*t.sample_shape)
                _lib.check(lib.tsock_layout_add(lay, t.name.encode(), t.dtype,
                                                len(t.sample_shape), shape),
                           "tsock_layout_add")
            h = ctypes.c_void_p()
            ep = self._endpoint_arg
            ep = ep.encode() if isinstance(ep, str) else ep
            _lib.check(lib.tsock_producer_create(ctypes.byref(h), ep, lay, self.batch_size,
                                                 self.slots), "tsock_producer_create")
        finally:
            lib.tsock_layout_destroy(lay)
        self._h = h.value
        self._finalizer = weakref.finalize(self, lib.tsock_producer_destroy, self._h)
        try:
            if self.heartbeat is not None:
                interval, hb_timeout = self.heartbeat
                _lib.check(lib.tsock_producer_set_heartbeat(self._h, _ms(interval),
                                                            _ms(hb_timeout)),
                           "tsock_producer_set_heartbeat")
            if self._curve[0] is not None:
                security.check(lib.tsock_producer_set_curve(self._h, *self._curve),
                               "tsock_producer_set_curve", self._curve)
            if self.insecure_open_to_network:
                _lib.check(lib.tsock_producer_set_insecure(self._h, 1),
                           "tsock_producer_set_insecure")
            if self.device is not None:
                _lib.check(lib.tsock_producer_set_device(self._h, self.device),
                           "tsock_producer_set_device")
            if sampler is not None:
                _lib.check(lib.tsock_producer_set_sampler(self._h, *sampler),
                           "tsock_producer_set_sampler")
            if shard_order is not None:
                _lib.check(lib.tsock_producer_set_shard_order(self._h, *shard_order),
                           "tsock_producer_set_shard_order")
            _lib.check(lib.tsock_producer_start(self._h), "tsock_producer_start")
        except BaseException:
            self.close()
            raise
        self._layout = layout
        self.names = tuple(t.name for t in layout)

    @property
    def started(self):
        return self._h is not None

    @property
    def endpoint(self):
        """The endpoint served (the resolved default when created with None); None before
        start."""
        if self._h is None:
            return None
        return lib.tsock_producer_endpoint(self._h).decode()

    def wait_consumers(self, count, timeout=None):
        """Waits until at least `count` connected consumers would receive a batch published
        now (a rank waiting for the rest of its group, or a paused consumer, such as a job that
        joined and has not read yet, does not count); returns how many.
        Raises tsock.Timeout after `timeout` seconds (None: forever)."""
        self._check_started()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if deadline is None:
                chunk = _WAIT_CHUNK_MS
            else:
                chunk = min(_WAIT_CHUNK_MS, max(0, int((deadline - time.monotonic()) * 1000)))
            rc = lib.tsock_producer_wait_consumers(self._h, int(count), chunk)
            if rc not in _AGAIN:
                return _lib.check(rc, "tsock_producer_wait_consumers")
            if deadline is not None and time.monotonic() >= deadline:
                raise _lib.error(-errno.ETIMEDOUT, "tsock_producer_wait_consumers")

    # ---- publishing ----

    def _acquire(self):
        if self._slot is not None:
            return self._slot  # acquired by a publish that failed while copying
        total = _ms(self.timeout)
        deadline = None if total < 0 else time.monotonic() + total / 1000.0
        out = self._slot_out
        while True:
            if deadline is None:
                chunk = _WAIT_CHUNK_MS
            else:
                chunk = min(_WAIT_CHUNK_MS, max(0, int((deadline - time.monotonic()) * 1000)))
            rc = lib.tsock_producer_acquire(self._h, chunk, ctypes.byref(out))
            if rc == 0:
                self._slot = out.value
                return self._slot
            if rc not in _AGAIN:
                raise _lib.error(rc, "tsock_producer_acquire")
            if deadline is not None and time.monotonic() >= deadline:
                raise _lib.error(-errno.ETIMEDOUT, "tsock_producer_acquire")

    def publish(self, batch, epoch_end=False):
        """Copies `batch` into a free slot (waiting for one) and announces it to every
        consumer connected now. The batch is number `index_in_epoch` of epoch `epoch`;
        `epoch_end` ends that epoch (the next batch starts the following one). Returns the
        number of samples published."""
        if self._finished:
            raise errors.TsockError(errors.E_STATE, "the stream was finished", "publish")
        parts = self._split(batch)
        if self._h is None:
            self.start(batch)
        n = self._validate(parts)
        slot = self._acquire()
        for i, (name, a, _dtype) in enumerate(parts):
            t = self._layout[i]
            address = lib.tsock_slot_data(slot, i)
            if not address:
                raise errors.TsockError(-errno.EINVAL, f"no memory for tensor {name!r}",
                                        "tsock_slot_data")
            dst = _views.host_array(address, (n,) + t.sample_shape, t.np_dtype, None,
                                    readonly=False)
            np.copyto(dst, a, casting="no")
        _lib.check(lib.tsock_slot_set_epoch(slot, self.epoch, self.index_in_epoch,
                                            1 if epoch_end else 0), "tsock_slot_set_epoch")
        _lib.check(lib.tsock_producer_publish(self._h, slot, n), "tsock_producer_publish")
        self._slot = None
        if epoch_end:
            self.epoch += 1
            self.index_in_epoch = 0
        else:
            self.index_in_epoch += 1
        return n

    def _validate(self, parts):
        layout = self._layout
        if len(parts) != len(layout):
            raise ValueError(f"a batch has {len(parts)} tensors, the stream has {len(layout)}")
        n = int(parts[0][1].shape[0]) if parts[0][1].ndim else 0
        for (name, a, dtype), t in zip(parts, layout):
            if name != t.name:
                raise ValueError(f"tensor {name!r} where the layout has {t.name!r}")
            if dtype != t.dtype or a.ndim < 1 or tuple(a.shape[1:]) != t.sample_shape:
                raise ValueError(
                    f"tensor {name!r} is {a.dtype}{list(a.shape)}, the stream's layout is "
                    f"{t.np_dtype}[B, {', '.join(map(str, t.sample_shape))}] (taken from the "
                    f"first batch)")
            if a.shape[0] != n:
                raise ValueError(f"tensors of one batch disagree on its sample count: "
                                 f"{parts[0][0]!r} has {n}, {name!r} has {a.shape[0]}")
        if not 1 <= n <= self.batch_size:
            raise ValueError(f"a batch must hold 1..{self.batch_size} samples (the producer's "
                             f"batch_size), this one holds {n}")
        return n

    def run(self, iterable, epochs=1, wait_consumers=0, wait_timeout=None):
        """Publishes `epochs` epochs: each is one pass over `iterable` (``iter()`` is called
        again per epoch, so pass a re-iterable object such as a torch DataLoader or a list,
        not a generator, for several epochs). The last batch of each epoch carries the
        epoch-end flag (a one-batch lookahead finds it). `epochs` None: forever.

        `wait_consumers`: before the first batch, wait until that many consumers joined and
        read (a batch published while no consumer is connected is dropped).
        Returns the number of batches published. The stream is not finished: call
        :meth:`finish` (or leave the ``with`` block) when done.
        """
        published = 0
        epoch = 0
        while epochs is None or epoch < epochs:
            it = iter(iterable)
            try:
                current = next(it)
            except StopIteration:
                raise ValueError(
                    f"the iterable yielded no batch in epoch {epoch} of this run (a one-shot "
                    f"iterator such as a generator cannot be read again)") from None
            if self._h is None:
                self.start(current)
            if wait_consumers and published == 0:
                self.wait_consumers(wait_consumers, wait_timeout)
            for following in it:
                self.publish(current)
                published += 1
                current = following
            self.publish(current, epoch_end=True)
            published += 1
            epoch += 1
        return published

    def serve(self, dataset, epochs=1, seed=0, wait_consumers=0, wait_timeout=None):
        """Serves a map-style dataset (``len(dataset)`` and ``dataset[i]``, as a
        torch.utils.data.Dataset) with the library's sampler, as tsock-producer serves its
        datasets: every consumer gets exact epochs (each sample once) whenever it joins, at
        its own batch size, and a seeded shuffle that is the same for every run with `seed`.
        ``dataset[i]`` returns one sample: a tuple of arrays/tensors/numbers, a dict, or one
        array, each without the batch dimension (sample 0 fixes the layout and the names).
        The samples of a batch are written straight into the slot. `epochs` None: forever.
        While no consumer is connected nothing is published (the producer waits; `wait_consumers`
        waits for that many before the first batch). Returns the number of batches published;
        finishes the stream after the last epoch.

        Use :meth:`run` instead for an iterable of ready batches (an existing DataLoader):
        without sample ids the library cannot give a consumer that joins mid-epoch an exact
        epoch there."""
        n = len(dataset)
        if n < 1:
            raise ValueError("the dataset is empty")
        if self._h is not None:
            raise errors.TsockError(errors.E_STATE, "serve() starts the producer itself: call "
                                    "it on a producer that was not started", "serve")
        example = self._sample_batch(dataset[0])
        self._start(example, (n, int(seed), 0 if epochs is None else int(epochs)))
        if wait_consumers:
            self.wait_consumers(wait_consumers, wait_timeout)
        return self._publish_all(lambda slot: self._fill_from(dataset, slot))

    def _publish_all(self, fill):
        """Fills (`fill(slot)`) and publishes slots until the stream ends, then finishes it;
        returns the number of batches published."""
        published = 0
        while True:
            # The library's count leaves out ranks waiting for the rest of their group (they
            # would receive nothing), so this returns at once only when a batch reaches someone:
            # a waiting group costs no decoding.
            if not lib.tsock_producer_stream_ended(self._h):
                self.wait_consumers(1, None)
            try:
                slot = self._acquire()
            except errors.TsockError as e:
                if e.code == errors.E_END:
                    break
                raise
            fill(slot)
            _lib.check(lib.tsock_producer_publish(self._h, slot, lib.tsock_slot_planned(slot)),
                       "tsock_producer_publish")
            self._slot = None
            published += 1
        self.finish()
        return published

    def serve_images(self, source, path, epochs=1, seed=0, preset="train", image_size=224,
                     workers=0, on_error="skip", index_cache=None, split=None, label_key=None,
                     shuffle="samples", shard_window=4, wait_consumers=0, wait_timeout=None,
                     entry_points_mb=None):
        """Serves an image dataset with the library's own pipeline, as ``tsock-producer``
        does: it is indexed, read (io_uring) and decoded and augmented on native worker
        threads straight into the slots; batches hold "image" (uint8, image_size x
        image_size x 3), "label" and "index" (the sample id). Consumers get exact epochs as
        with :meth:`serve`.

        source: "folder" (an ImageFolder tree at `path`), "list" (a "path label" file) or
            "webdataset" (tar shards; `path` is a SPEC: a brace pattern such as
            ``"/data/train-{0000..1023}.tar"``, a directory, or a file listing shards; sample
            ids are positions in shard order, then tar order; docs/pipeline.md).
        preset: "train" (RandomResizedCrop + flip) or "val" (Resize + CenterCrop).
        workers: decoding threads (0: one per CPU). on_error: "skip" or "fail".
        index_cache: a file to keep the index in between runs.
        entry_points_mb: memory (MiB) for the JPEGs' entry points kept across epochs, which let
            later epochs decode only what their crop needs (None: the library's default, 1024;
            0: none; about 2 KiB per ImageNet-sized file; docs/pipeline.md, "Entry points").
        split, label_key (webdataset): the split of the directory's timm info file, and the
            json field holding labels instead of the cls member.
        shuffle: "samples" (a permutation of all samples per epoch) or "shards" (webdataset:
            a permutation of shards, then of samples within windows of `shard_window`
            shards, for storage where random reads are slow; still exact).

        Returns the number of batches published; finishes the stream after the last epoch.
        Raises TsockError for a dataset that cannot be opened (the library's log says why),
        ValueError for a bad option."""
        from . import _pipeline
        if self._h is not None:
            raise errors.TsockError(errors.E_STATE, "serve_images() starts the producer "
                                    "itself: call it on a producer that was not started",
                                    "serve_images")
        _pipeline.check_shuffle(shuffle, source, shard_window)
        pipe = _pipeline.Pipeline(source, path, preset=preset, image_size=image_size,
                                  workers=workers, seed=seed, on_error=on_error,
                                  index_cache=index_cache, split=split, label_key=label_key,
                                  entry_points_mb=entry_points_mb)
        try:
            order = _pipeline.shard_order(shuffle, pipe, shard_window)
            self._start(None, (pipe.samples, int(seed), 0 if epochs is None else int(epochs)),
                        native=pipe, shard_order=order)
            if wait_consumers:
                self.wait_consumers(wait_consumers, wait_timeout)
            return self._publish_all(pipe.fill)
        finally:
            # The slots hold decoded images only; the pipeline is no longer needed.
            pipe.close()

    def _sample_batch(self, sample):
        """One sample as a batch of one, for the layout."""
        if isinstance(sample, dict):
            return {k: np.asarray(_host_array_any(v))[None] for k, v in sample.items()}
        if isinstance(sample, (tuple, list)):
            return tuple(np.asarray(_host_array_any(v))[None] for v in sample)
        return np.asarray(_host_array_any(sample))[None]

    def _fill_from(self, dataset, slot):
        """Writes every planned sample of `slot` (the sampler's ids) into it."""
        count = lib.tsock_slot_planned(slot)
        ids = lib.tsock_slot_sample_ids(slot)
        dsts = []
        for i, t in enumerate(self._layout):
            address = lib.tsock_slot_data(slot, i)
            dsts.append(_views.host_array(address, (count,) + t.sample_shape, t.np_dtype, None,
                                          readonly=False))
        for j in range(count):
            sample = dataset[int(ids[j])]
            parts = (list(sample.values()) if isinstance(sample, dict) else
                     list(sample) if isinstance(sample, (tuple, list)) else [sample])
            if len(parts) != len(dsts):
                raise ValueError(f"sample {int(ids[j])} has {len(parts)} parts, sample 0 had "
                                 f"{len(dsts)}")
            for dst, part in zip(dsts, parts):
                np.copyto(dst[j, ...], _host_array_any(part), casting="same_kind")

    # ---- statistics and lifetime ----

    def stats(self):
        """Producer figures (batches, samples, epochs, released, held, slots, free_slots,
        consumers, joined, lost, bad_messages, wait_s: time blocked waiting for a free slot)
        and, under "consumers_info", one dict per connected consumer (id, pid, batches,
        samples, released, held, lag, rate, paused, and what it reported about itself:
        consumed_batches, consumed_samples, epochs, wait_s). docs/stats.md explains them."""
        self._check_started()
        v = ctypes.c_uint64()
        out = {}
        for name, key in _PRODUCER_STATS.items():
            _lib.check(lib.tsock_producer_stat(self._h, -1, key, ctypes.byref(v)),
                       "tsock_producer_stat")
            out[name] = v.value
        _lib.check(lib.tsock_producer_stat(self._h, -1, _STAT_WAIT_NS, ctypes.byref(v)),
                   "tsock_producer_stat")
        out["wait_s"] = v.value / 1e9
        per = []
        for i in range(lib.tsock_producer_consumer_count(self._h)):
            c = {}
            for name, key in _CONSUMER_STATS.items():
                rc = lib.tsock_producer_stat(self._h, i, key, ctypes.byref(v))
                if rc == -errno.ENOENT:  # it left since the count was read
                    c = None
                    break
                if rc == 0:
                    c[name] = v.value
            if c is not None:
                # What the consumer reports about itself, and its rate, in friendlier units.
                c["rate"] = c.pop("rate_milli", 0) / 1000.0
                c["wait_s"] = c.pop("wait_ns", 0) / 1e9
                c["paused"] = bool(c.get("paused", 0))
                per.append(c)
        out["consumers_info"] = per
        return out

    def set_status(self, status):
        """Sets the application status every statistics reply carries (``tsock-stat`` shows it,
        :func:`tsock.query_stats` returns it under "status"): a dict of JSON-serialisable
        figures, such as ``{"images_per_s": 2410.5}``, or a str holding one JSON object; None
        clears it. At most 4096 bytes as compact JSON (ValueError beyond, or for anything that
        is not a JSON object). Call it as often as the figures change, after the start."""
        self._check_started()
        if status is None:
            text = b""
        elif isinstance(status, dict):
            text = json.dumps(status, separators=(",", ":"), ensure_ascii=False,
                              allow_nan=False).encode()
        elif isinstance(status, str):
            text = status.encode()
        else:
            raise TypeError(f"status must be a dict, a str or None, not {type(status).__name__}")
        rc = lib.tsock_producer_set_status(self._h, text)
        if rc in (-errno.EINVAL, -errno.EMSGSIZE):
            raise ValueError(("the status is longer than 4096 bytes" if rc == -errno.EMSGSIZE
                              else "the status must be one JSON object on one line, in UTF-8")
                             ) from _lib.error(rc, "tsock_producer_set_status")
        _lib.check(rc, "tsock_producer_set_status")

    def consumer_count(self):
        """Consumers connected now."""
        self._check_started()
        return lib.tsock_producer_consumer_count(self._h)

    def _check_started(self):
        if self._h is None:
            raise errors.TsockError(errors.E_STATE, "the producer is not started (publish a "
                                    "batch or call start(example) first)", None)

    def finish(self):
        """Tells every consumer the stream ended: they receive the batches already sent, then
        tsock.EndOfStream. Nothing can be published afterwards."""
        if self._h is not None and not self._finished:
            self._slot = None  # an acquired, unpublished slot is dropped by the library
            _lib.check(lib.tsock_producer_finish(self._h), "tsock_producer_finish")
        self._finished = True

    def close(self):
        """Stops serving, removes the shared memory and socket file, frees everything.
        Consumers not told the end by finish() get tsock.ProducerStopped."""
        if self._h is None:
            return
        self._h = None
        self._slot = None
        self._finalizer()

    @property
    def closed(self):
        return self._h is None and self._finalizer is not None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                self.finish()
        finally:
            self.close()

    def __repr__(self):
        state = "not started" if self._h is None else self.endpoint
        return f"<tsock.Producer {state} batch_size={self.batch_size} slots={self.slots}>"
