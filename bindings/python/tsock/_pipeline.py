"""The native image pipeline (include/tsock/pipeline.h) for :meth:`tsock.Producer.serve_images`:
the library indexes a dataset (an ImageFolder tree, a list file or WebDataset tar shards),
reads it with io_uring and decodes and augments it on its own worker threads, straight into
the producer's slots. Python only drives the loop."""
import ctypes

from . import _lib, errors
from ._lib import lib

SOURCES = {"folder": 0, "list": 1, "webdataset": 2}
PRESETS = {"train": 0, "val": 1}
ON_ERROR = {"skip": 0, "fail": 1}
SHUFFLES = ("samples", "shards")


def _choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"{name}={value!r}: expected one of {', '.join(map(repr, choices))}")
    return choices[value] if isinstance(choices, dict) else value


class Pipeline:
    """One tsock_pipeline: configured and opened (indexed) at construction."""

    def __init__(self, source, path, preset="train", image_size=224, workers=0, seed=0,
                 on_error="skip", index_cache=None, split=None, label_key=None,
                 entry_points_mb=None):
        _lib.require("tsock_pipeline_create", "Producer.serve_images")
        src = _choice("source", source, SOURCES)
        if src != SOURCES["webdataset"] and (split is not None or label_key is not None):
            raise ValueError("split= and label_key= are options of source='webdataset'")
        if entry_points_mb is not None and (isinstance(entry_points_mb, bool) or
                                            not isinstance(entry_points_mb, int) or
                                            not 0 <= entry_points_mb <= 1 << 30):
            raise ValueError(f"entry_points_mb={entry_points_mb!r}: MiB, 0..{1 << 30}")
        h = ctypes.c_void_p()
        _lib.check(lib.tsock_pipeline_create(ctypes.byref(h), src, str(path).encode()),
                   "tsock_pipeline_create")
        self._h = h.value
        try:
            _lib.check(lib.tsock_pipeline_set_preset(self._h, _choice("preset", preset, PRESETS)),
                       "tsock_pipeline_set_preset")
            _lib.check(lib.tsock_pipeline_set_image_size(self._h, int(image_size)),
                       "tsock_pipeline_set_image_size")
            _lib.check(lib.tsock_pipeline_set_workers(self._h, int(workers)),
                       "tsock_pipeline_set_workers")
            _lib.check(lib.tsock_pipeline_set_seed(self._h, int(seed)), "tsock_pipeline_set_seed")
            _lib.check(lib.tsock_pipeline_set_on_error(self._h,
                                                       _choice("on_error", on_error, ON_ERROR)),
                       "tsock_pipeline_set_on_error")
            if index_cache is not None:
                _lib.check(lib.tsock_pipeline_set_index_cache(self._h, str(index_cache).encode()),
                           "tsock_pipeline_set_index_cache")
            if entry_points_mb is not None:
                _lib.check(lib.tsock_pipeline_set_entry_points(self._h, entry_points_mb << 20),
                           "tsock_pipeline_set_entry_points")
            if src == SOURCES["webdataset"]:
                _lib.check(lib.tsock_pipeline_set_shard_options(
                    self._h, None if split is None else str(split).encode(),
                    None if label_key is None else str(label_key).encode()),
                    "tsock_pipeline_set_shard_options")
            _lib.check(lib.tsock_pipeline_open(self._h), "tsock_pipeline_open")
        except BaseException:
            self.close()
            raise
        self.image_size = int(image_size)

    @property
    def samples(self):
        return int(lib.tsock_pipeline_samples(self._h))

    def shard_starts(self):
        """(shards, ctypes array of shards + 1 first ids); shards is 0 for other sources."""
        n = int(lib.tsock_pipeline_shards(self._h))
        if n == 0:
            return 0, None
        starts = (ctypes.c_uint64 * (n + 1))()
        _lib.check(lib.tsock_pipeline_shard_starts(self._h, starts), "tsock_pipeline_shard_starts")
        return n, starts

    def sample_path(self, sample_id):
        """A sample's path (folder, list) or key (webdataset), as the index names it."""
        p = lib.tsock_pipeline_sample_path(self._h, int(sample_id))
        if p is None:
            raise IndexError(f"no sample {sample_id}")
        return p.decode(errors="surrogateescape")

    def add_tensors(self, layout):
        rc = lib.tsock_pipeline_add_tensors(self._h, layout)
        if rc < 0:
            raise _lib.error(rc, "tsock_pipeline_add_tensors")

    def fill(self, slot):
        rc = lib.tsock_pipeline_fill(self._h, slot)
        if rc < 0:
            raise _lib.error(rc, "tsock_pipeline_fill")

    def close(self):
        if self._h is not None:
            lib.tsock_pipeline_destroy(self._h)
            self._h = None


def check_shuffle(shuffle, source, window):
    """Rejects a bad shuffle option before anything is indexed."""
    _choice("shuffle", shuffle, SHUFFLES)
    if shuffle == "shards" and source != "webdataset":
        raise ValueError("shuffle='shards' needs source='webdataset'")
    if int(window) < 1:
        raise ValueError("shard_window must be at least 1")


def shard_order(shuffle, pipeline, window):
    """The (starts, shards, window) of tsock_producer_set_shard_order for shuffle="shards",
    None for "samples"."""
    _choice("shuffle", shuffle, SHUFFLES)
    if shuffle == "samples":
        return None
    shards, starts = pipeline.shard_starts()
    if shards == 0:
        raise ValueError("shuffle='shards' needs source='webdataset'")
    if int(window) < 1:
        raise ValueError("shard_window must be at least 1")
    return starts, shards, int(window)


__all__ = ["Pipeline", "shard_order", "errors"]
