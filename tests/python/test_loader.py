"""tsock.DataLoader against the real tsock-producer program (synthetic dataset).

These tests pass with torch and without it (test_numpy_only.py runs this file again in a
process where torch cannot be imported): items are torch tensors or numpy arrays accordingly.
"""
import os
import signal
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pytest

from tsock_testutil import as_numpy, start_producer, synthetic_images


def torch_or_none():
    try:
        import torch

        return torch
    except ImportError:
        return None


def expected_type(tsock):
    torch = None if tsock._views.get_torch() is None else torch_or_none()
    return torch.Tensor if torch is not None else np.ndarray


def read_epoch(loader):
    """(batches, ids, labels, images) of one epoch, copied out of the shared memory."""
    ids, labels, images, batches = [], [], [], 0
    for item in loader:
        x, y, i = (as_numpy(t) for t in item)
        images.append(x.copy())
        labels.append(y.copy())
        ids.append(i.copy())
        batches += 1
    if not batches:
        return 0, np.zeros(0, np.int64), np.zeros(0, np.int64), None
    return batches, np.concatenate(ids), np.concatenate(labels), np.concatenate(images)


def test_epochs_and_len(tsock, programs, procs, endpoint):
    prod = start_producer(programs, procs, endpoint, batch_size=16, samples=100, epochs=3)
    with tsock.DataLoader(endpoint, return_ids=True, timeout=20) as loader:
        # tsock-producer has a sampler: the library knows the epoch length from the start.
        assert len(loader) == 7
        assert loader.consumer.dataset_size == 100
        for epoch in range(3):
            batches, ids, labels, _ = read_epoch(loader)
            assert batches == 7  # 6 full batches and one of 4 samples: never straddling epochs
            assert sorted(ids.tolist()) == list(range(100)), f"epoch {epoch} not exact"
            assert len(loader) == 7
        with pytest.raises(tsock.EndOfStream) as info:
            iter(loader).__next__()
        assert info.value.code == tsock.E_END
        assert isinstance(info.value, tsock.TsockError)
        stats = loader.stats()
        assert stats["batches"] == 21 and stats["samples"] == 300
        assert stats["held"] == 0 and stats["wait_s"] >= 0.0
        assert stats["views"] == 21 and stats["gathers"] == 0  # producer's own batch size
    assert prod.wait(timeout=20) == 0


def test_len_from_samples_and_drop_last(tsock, programs, procs, endpoint):
    start_producer(programs, procs, endpoint, batch_size=16, samples=100, epochs=2)
    with tsock.DataLoader(endpoint, samples=100, drop_last=True, return_ids=True,
                          timeout=20) as loader:
        assert len(loader) == 6  # known from samples=, before any batch
        for _ in range(2):
            batches, ids, _, _ = read_epoch(loader)
            assert batches == 6 and len(ids) == 96 and len(set(ids.tolist())) == 96
            assert len(loader) == 6


def test_content_byte_by_byte(tsock, programs, procs, endpoint):
    # More samples than labels (1000) so labels and ids differ; a short last batch too.
    size, samples, bs = 8, 1300, 64
    start_producer(programs, procs, endpoint, batch_size=bs, samples=samples, image_size=size,
                   epochs=2, seed=7)
    kind = None
    with tsock.DataLoader(endpoint, return_ids=True, timeout=20) as loader:
        assert loader.batch_size == bs
        for _ in range(2):
            seen = set()
            for images, labels, ids in loader:
                kind = type(images)
                assert type(labels) is kind and type(ids) is kind
                x, y, i = as_numpy(images), as_numpy(labels), as_numpy(ids)
                assert x.dtype == np.uint8 and x.shape == (len(i), size, size, 3)
                assert y.dtype == np.int64 and i.dtype == np.int64
                assert np.array_equal(x, synthetic_images(i, size)), "image bytes differ"
                assert np.array_equal(y, i % 1000), "labels not aligned with ids"
                assert not seen.intersection(i.tolist()), "a sample came twice in an epoch"
                seen.update(i.tolist())
            assert seen == set(range(samples))
    assert kind is expected_type(tsock)


def test_items_are_zero_copy_read_only_views(tsock, programs, procs, endpoint):
    start_producer(programs, procs, endpoint, batch_size=8, samples=32, epochs=1)
    lib = tsock._lib.lib
    with tsock.Consumer(endpoint, timeout=20) as consumer:
        batch = consumer.next(timeout=20)
        image = batch.array("image")
        assert image.ctypes.data == lib.tsock_batch_tensor_data(batch._ptr, 0)
        assert not image.flags.writeable
        with pytest.raises(ValueError):
            image[0, 0, 0, 0] = 1
        assert [t.name for t in consumer.layout] == ["image", "label", "index"]
        assert np.array_equal(batch.array("label"), batch.array(2) % 1000)
        batch.release()
        assert batch.released
        with pytest.raises(ValueError, match="released"):
            batch.array("image")


def test_torch_tensors_share_the_slot_memory(tsock, programs, procs, endpoint):
    torch = pytest.importorskip("torch")
    if tsock._views.get_torch() is None:
        pytest.skip("torch disabled by TSOCK_NO_TORCH")
    start_producer(programs, procs, endpoint, batch_size=8, samples=32, epochs=1)
    lib = tsock._lib.lib
    with tsock.DataLoader(endpoint, timeout=20) as loader:
        it = iter(loader)
        images, labels = next(it)
        assert isinstance(images, torch.Tensor) and images.dtype == torch.uint8
        batch = loader._held
        assert images.data_ptr() == lib.tsock_batch_tensor_data(batch._ptr, 0)
        assert labels.data_ptr() == lib.tsock_batch_tensor_data(batch._ptr, 1)
        # The usual first step of a training loop works on the views (and copies).
        x = images.permute(0, 3, 1, 2).float().div(255)
        assert x.shape == (8, 3, 8, 8)


def test_previous_batch_released_when_next_requested(tsock, programs, procs, endpoint):
    start_producer(programs, procs, endpoint, batch_size=8, samples=64, epochs=1, slots=4)
    with tsock.DataLoader(endpoint, timeout=20) as loader:
        count = 0
        for _ in loader:
            count += 1
            assert loader.stats()["held"] == 1
        assert count == 8
        assert loader.stats()["held"] == 0  # the epoch-end batch went back on StopIteration
        assert loader.stats()["released"] == 8


def test_break_skips_to_next_epoch(tsock, programs, procs, endpoint):
    # Until stopped: the job left epoch 0 early and gave its batches back (it paused), so its
    # next epochs are fresh windows of the stream, not the producer's epochs 1 and 2.
    start_producer(programs, procs, endpoint, batch_size=10, samples=50, epochs=0)
    with tsock.DataLoader(endpoint, return_ids=True, timeout=20) as loader:
        for n, _ in enumerate(loader):
            if n == 1:
                break
        assert loader.stats()["held"] == 1  # kept until the next request
        batches, ids, _, _ = read_epoch(loader)  # a whole epoch, from its first batch
        assert batches == 5 and sorted(ids.tolist()) == list(range(50))
        assert loader.epoch == 1
        batches, ids, _, _ = read_epoch(loader)
        assert batches == 5 and loader.epoch == 2


def test_exception_in_loop_then_continue(tsock, programs, procs, endpoint):
    # Until stopped: leaving the loop paused the job, whose next epoch is a fresh window of the
    # stream rather than the producer's epoch 1.
    prod = start_producer(programs, procs, endpoint, batch_size=10, samples=50, epochs=0,
                          slots=2)
    loader = tsock.DataLoader(endpoint, return_ids=True, timeout=20)
    with pytest.raises(RuntimeError, match="training step failed"):
        for n, _ in enumerate(loader):
            if n == 2:
                raise RuntimeError("training step failed")
    # The loader is still usable: the batch that was held is released by the next request,
    # and with only 2 slots the producer could not have gone on otherwise.
    batches, ids, _, _ = read_epoch(loader)
    assert batches == 5 and sorted(ids.tolist()) == list(range(50))
    assert loader.stats()["held"] == 0
    loader.close()
    prod.send_signal(signal.SIGTERM)
    assert prod.wait(timeout=20) == 0


def test_producer_killed_raises_producer_lost(tsock, programs, procs, endpoint):
    """The consumer's heartbeat timeout (3 s by default), not the loader's 60 s timeout, ends
    the loop: the error is ProducerLost, never Timeout. How long it took is printed only."""
    prod = start_producer(programs, procs, endpoint, batch_size=8, samples=64, epochs=0,
                          slots=4)
    loader = tsock.DataLoader(endpoint, timeout=60)  # liveness, not this timeout, must fire
    it = iter(loader)
    for _ in range(3):
        next(it)
    prod.send_signal(signal.SIGKILL)
    prod.wait(timeout=10)
    killed = time.monotonic()
    with pytest.raises(tsock.TsockError) as info:
        # The batches already sent are still delivered, then the error comes.
        for _ in it:
            pass
        while True:
            for _ in loader:
                pass
    elapsed = time.monotonic() - killed
    assert isinstance(info.value, tsock.ProducerLost), repr(info.value)
    assert info.value.code == tsock.E_PRODUCER_LOST
    assert "producer" in info.value.message
    print(f"the dead producer was noticed after {elapsed:.2f} s")
    loader.close()


def test_producer_sigterm_stops_consumers(tsock, programs, procs, endpoint):
    prod = start_producer(programs, procs, endpoint, batch_size=8, samples=64, epochs=0)
    with tsock.DataLoader(endpoint, timeout=20) as loader:
        it = iter(loader)
        next(it)
        prod.send_signal(signal.SIGTERM)
        assert prod.wait(timeout=10) == 0
        with pytest.raises(tsock.TsockError) as info:
            for _ in it:
                pass
            while True:
                for _ in loader:
                    pass
        # An endless stream stopped by a signal did not end: the consumers are told it stopped.
        assert isinstance(info.value, tsock.ProducerStopped), repr(info.value)
        assert info.value.code == tsock.E_PRODUCER_STOPPED


def test_batch_size_and_device_arguments(tsock, programs, procs, endpoint):
    start_producer(programs, procs, endpoint, batch_size=16, samples=64, epochs=0)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="batch_size"):
            tsock.DataLoader(endpoint, batch_size=bad, timeout=20)
    with tsock.DataLoader(endpoint, batch_size=32, timeout=20) as loader:
        assert loader.batch_size == 32 and loader.consumer.producer_batch_size == 16
        assert len(loader) == 2
        images, labels = next(iter(loader))
        assert len(labels) == 32
    with pytest.raises(ValueError, match="unknown device"):
        tsock.DataLoader(endpoint, device="tpu", timeout=20)
    # A host ring and device="cuda": the tensors are copied to the GPU (test_cuda.py covers a
    # ring in GPU memory).
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        with tsock.DataLoader(endpoint, device="cuda", timeout=20) as loader:
            images, labels = next(iter(loader))
            assert images.is_cuda and labels.is_cuda
    with tsock.DataLoader(endpoint, batch_size=16, device="cpu", output="numpy",
                          names=("label", "index", "image"), timeout=20) as loader:
        labels, ids, images = next(iter(loader))
        assert isinstance(images, np.ndarray) and images.ndim == 4
        assert np.array_equal(labels, ids % 1000)
    with tsock.DataLoader(endpoint, names=("nope",), timeout=20) as loader:
        with pytest.raises(ValueError, match="no tensor 'nope'"):
            next(iter(loader))


def test_output_kind_matches_torch_availability(tsock, programs, procs, endpoint):
    start_producer(programs, procs, endpoint, batch_size=8, samples=16, epochs=1)
    with tsock.DataLoader(endpoint, timeout=20) as loader:
        images, _ = next(iter(loader))
        if os.environ.get("TSOCK_TEST_EXPECT_NO_TORCH") == "1":
            assert loader.output == "numpy" and "torch" not in sys.modules
        assert type(images) is expected_type(tsock)


def test_consumer_joining_mid_epoch(tsock, programs, procs, endpoint):
    """A consumer joining while the producer is inside an epoch has epochs of its own: the
    first one starts with its first sample and is complete, like every later one."""
    start_producer(programs, procs, endpoint, batch_size=8, samples=160, epochs=0, slots=4)
    # Another job keeps the endless stream going, whatever this one does.
    first = subprocess.Popen([programs["tsock-consume"], "--endpoint", endpoint, "--epochs", "0",
                              "--samples", "160", "--delay-ms", "2", "--quiet"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.append(first)
    time.sleep(0.2)  # let the stream start; where exactly it is does not matter below
    with tsock.DataLoader(endpoint, return_ids=True, timeout=20) as loader:
        assert len(loader) == 20
        for epoch in range(3):
            batches, ids, _, _ = read_epoch(loader)
            assert not loader.partial_epoch and loader.epoch == epoch
            assert batches == 20 and sorted(ids.tolist()) == list(range(160)), epoch
    assert first.poll() is None  # the other job was never disturbed


def test_close_warns_about_views_still_alive(tsock, programs, procs, endpoint):
    start_producer(programs, procs, endpoint, batch_size=8, samples=32, epochs=0)
    loader = tsock.DataLoader(endpoint, timeout=20)
    images, labels = next(iter(loader))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader.close()
    assert any(issubclass(w.category, ResourceWarning) and "unmapped" in str(w.message)
               for w in caught), [str(w.message) for w in caught]
    del images, labels
    loader = tsock.DataLoader(endpoint, timeout=20)
    for item in loader:
        pass
    del item  # a loop variable outlives its loop
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader.close()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
    with pytest.raises(ValueError, match="closed"):
        iter(loader)


def test_timeout_without_producer(tsock, endpoint):
    t0 = time.monotonic()
    with pytest.raises(tsock.Timeout) as info:
        tsock.DataLoader(endpoint, timeout=0.3)
    assert info.value.code == -110 and info.value.errno == 110
    assert isinstance(info.value, TimeoutError)
    assert time.monotonic() - t0 < 60  # bounded: it did not hang (a bound, not a speed)


def check_epoch_content(ids, labels, images, image_size):
    assert np.array_equal(labels, ids % 1000), "labels not aligned with ids"
    assert np.array_equal(images, synthetic_images(ids, image_size)), "image bytes differ"


def test_own_batch_size_larger_than_producers(tsock, programs, procs, endpoint):
    # 100 per batch from 64-sample producer batches: batches are gathered from several slots.
    size, samples = 4, 1030
    start_producer(programs, procs, endpoint, batch_size=64, samples=samples, image_size=size,
                   epochs=2, seed=3)
    with tsock.DataLoader(endpoint, batch_size=100, return_ids=True, timeout=20) as loader:
        assert loader.batch_size == 100
        assert len(loader) == 11  # before any batch: ceil(1030 / 100)
        for epoch in range(2):
            sizes = []
            ids, labels, images = [], [], []
            for x, y, i in loader:
                sizes.append(len(as_numpy(i)))
                images.append(as_numpy(x).copy())
                labels.append(as_numpy(y).copy())
                ids.append(as_numpy(i).copy())
            ids, labels, images = map(np.concatenate, (ids, labels, images))
            assert sizes == [100] * 10 + [30], sizes
            assert sorted(ids.tolist()) == list(range(samples)), f"epoch {epoch} not exact"
            check_epoch_content(ids, labels, images, size)
            assert loader.epoch == epoch and len(loader) == 11
        stats = loader.stats()
        assert stats["batches"] == 22 and stats["samples"] == 2 * samples
        assert stats["views"] + stats["gathers"] == 22 and stats["gathers"] > 0


def test_own_batch_size_smaller_with_drop_last(tsock, programs, procs, endpoint):
    # 48 per batch from 64-sample producer batches, the short last batch dropped.
    size, samples = 4, 1030
    start_producer(programs, procs, endpoint, batch_size=64, samples=samples, image_size=size,
                   epochs=2, seed=5)
    with tsock.DataLoader(endpoint, batch_size=48, drop_last=True, return_ids=True,
                          timeout=20) as loader:
        assert len(loader) == samples // 48 == 21  # before any batch
        for epoch in range(2):
            batches, ids, labels, images = read_epoch(loader)
            assert batches == 21 and len(ids) == 21 * 48
            assert len(set(ids.tolist())) == len(ids), "a sample came twice in an epoch"
            assert set(ids.tolist()) <= set(range(samples))
            check_epoch_content(ids, labels, images, size)
            assert loader.epoch == epoch
        stats = loader.stats()
        assert stats["views"] > 0 and stats["gathers"] > 0  # some inside one slot, some not


def test_late_joiner_first_epoch_is_complete(tsock, programs, procs, endpoint):
    size, samples = 4, 320
    start_producer(programs, procs, endpoint, batch_size=16, samples=samples, image_size=size,
                   epochs=0, slots=4, seed=9)
    first = tsock.DataLoader(endpoint, return_ids=True, timeout=20, name="first")
    read_some = threading.Event()
    stop = threading.Event()
    result = {}

    def run_first():
        # Keeps reading whole epochs until told to stop, so the stream never stalls.
        try:
            n = 0
            while not stop.is_set():
                for _ in first:
                    n += 1
                    if n == 3:
                        read_some.set()
            result["ok"] = True
        except BaseException as e:  # reported by the main thread
            result["error"] = e
            read_some.set()

    t = threading.Thread(target=run_first, daemon=True)
    t.start()
    try:
        assert read_some.wait(timeout=20) and "error" not in result
        with tsock.DataLoader(endpoint, batch_size=24, return_ids=True, timeout=20,
                              name="late") as late:
            assert len(late) == 14  # ceil(320 / 24), known before the first batch
            for epoch in range(2):
                batches, ids, labels, images = read_epoch(late)
                assert not late.partial_epoch and late.epoch == epoch
                assert batches == 14, batches
                assert sorted(ids.tolist()) == list(range(samples)), f"epoch {epoch} not exact"
                check_epoch_content(ids, labels, images, size)
    finally:
        stop.set()
        t.join(timeout=30)
        first.close()
    assert "error" not in result, result.get("error")


def test_reconnect_ends_interrupted_epoch_and_continues(tsock, programs, procs, endpoint):
    samples = 160
    prod = start_producer(programs, procs, endpoint, batch_size=8, samples=samples, epochs=0,
                          slots=4)
    with tsock.DataLoader(endpoint, return_ids=True, timeout=20, reconnect=20,
                          heartbeat=(0.05, 0.5)) as loader:
        count = 0
        for _ in loader:
            count += 1
            if count == 3:
                prod.send_signal(signal.SIGKILL)
                prod.wait(timeout=10)
        assert count < 20  # the loop ended early (batches already sent came first), no error
        assert loader.last_epoch_interrupted and loader.interrupted_epochs == 1
        # The replacement starts once the loss was noticed. (One that binds the endpoint
        # before the consumer's heartbeat timeout gets the old session's messages and answers
        # TSOCK_E_REJECTED: a library-side race, outside what this test covers.)
        start_producer(programs, procs, endpoint, batch_size=8, samples=samples, epochs=0,
                       slots=4, seed=2)
        batches, ids, _, _ = read_epoch(loader)  # a complete epoch from the new producer
        assert not loader.last_epoch_interrupted
        assert batches == 20 and sorted(ids.tolist()) == list(range(samples))
