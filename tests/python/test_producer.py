"""tsock.Producer: publishing Python batches, with consumers in this and other processes."""
import gc
import json
import os

import numpy as np
import pytest

from tsock_testutil import start_python, synthetic_images, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))


def torch_or_none(tsock):
    return tsock._views.get_torch()


class SyntheticBatches:
    """A re-iterable source of (image, label, index) batches: a fresh permutation per pass,
    like a shuffling DataLoader. Numpy only."""

    def __init__(self, samples, batch_size, image_size, seed=0):
        self.samples, self.batch_size, self.image_size = samples, batch_size, image_size
        self.rng = np.random.default_rng(seed)

    def __iter__(self):
        order = self.rng.permutation(self.samples)
        for start in range(0, self.samples, self.batch_size):
            ids = order[start:start + self.batch_size].astype(np.int64)
            yield synthetic_images(ids, self.image_size), ids % 1000, ids


def torch_source(torch, samples, batch_size, image_size):
    """A torch DataLoader over a map-style Dataset with the same content."""

    class Synthetic(torch.utils.data.Dataset):
        def __len__(self):
            return samples

        def __getitem__(self, i):
            image = torch.from_numpy(synthetic_images([i], image_size)[0])
            return image, i % 1000, i

    return torch.utils.data.DataLoader(Synthetic(), batch_size=batch_size, shuffle=True,
                                       num_workers=0)


def test_python_producer_feeds_two_python_consumers(tsock, procs, endpoint):
    samples, bs, size, epochs = 200, 16, 8, 3
    torch = torch_or_none(tsock)
    if torch is not None:
        source = torch_source(torch, samples, bs, size)
    else:
        source = SyntheticBatches(samples, bs, size)
    child = os.path.join(HERE, "consumer_child.py")
    args = [endpoint, str(epochs), str(samples), str(size)]
    fast = start_python(procs, [child, *args])
    slow = start_python(procs, [child, *args, "--numpy", "--delay-ms", "2"])
    with tsock.Producer(endpoint, batch_size=bs, slots=4,
                        names=("image", "label", "index")) as producer:
        published = producer.run(source, epochs=epochs, wait_consumers=2, wait_timeout=20)
        assert published == epochs * 13  # 12 full batches and one of 8 per epoch
        stats = producer.stats()
        assert stats["batches"] == published and stats["samples"] == epochs * samples
        assert stats["joined"] == 2
    for p, output in ((fast, "torch" if torch is not None else "numpy"), (slow, "numpy")):
        out, err = p.communicate(timeout=25)
        assert p.returncode == 0, err + out
        r = json.loads(out)
        assert r["error"] is None
        assert r["output"] == output
        assert r["epochs"] == epochs and r["per_epoch"] == [samples] * epochs
        assert r["batches"] == epochs * 13 and r["samples"] == epochs * samples
        assert r["content_errors"] == 0 and r["label_errors"] == 0
        assert r["duplicates"] == 0 and r["missing"] == 0
        assert r["len"] == 13


def _connect(tsock, producer, endpoint):
    consumer = tsock.Consumer(endpoint, timeout=10)
    producer.wait_consumers(1, timeout=10)
    return consumer


def test_dtypes_shapes_and_dict_batches_round_trip(tsock, endpoint):
    rng = np.random.default_rng(3)

    def batch(n):
        return {
            "f32": rng.standard_normal((n, 3)).astype(np.float32),
            "i16": rng.integers(-300, 300, n).astype(np.int16),
            "u64": rng.integers(0, 2**63, (n, 2, 2), dtype=np.uint64),
            "f16": rng.standard_normal((n, 5)).astype(np.float16),
            "mask": rng.random(n) < 0.5,
            "f64": np.asfortranarray(rng.standard_normal((n, 2, 3))),  # not C-contiguous
        }

    sent = [batch(4), batch(3)]
    with tsock.Producer(endpoint, batch_size=4, slots=4) as producer:
        producer.start(sent[0])
        with _connect(tsock, producer, endpoint) as consumer:
            producer.publish(sent[0])
            producer.publish(sent[1], epoch_end=True)
            for k, expect in enumerate(sent):
                b = consumer.next(timeout=10)
                assert (b.epoch, b.index_in_epoch, b.epoch_end) == (0, k, k == 1)
                assert b.samples == len(expect["f32"])
                got = b.arrays()
                assert list(got) == list(expect)
                for name, want in expect.items():
                    if want.dtype == np.bool_:
                        want = want.astype(np.uint8)
                    assert got[name].dtype == want.dtype, name
                    assert np.array_equal(got[name], want), name
                b.release()
            assert producer.epoch == 1 and producer.index_in_epoch == 0


def test_torch_tensors_and_bfloat16_round_trip(tsock, endpoint):
    torch = torch_or_none(tsock)
    if torch is None:
        pytest.skip("torch is not available")
    x = torch.randn(6, 4).to(torch.bfloat16)
    y = torch.arange(6, dtype=torch.int32)
    z = torch.randn(6, 2, 3).transpose(1, 2)  # a non-contiguous view
    with tsock.Producer(endpoint, batch_size=8, names=("x", "y", "z")) as producer:
        producer.start((x, y, z))
        with _connect(tsock, producer, endpoint) as consumer:
            producer.publish((x, y, z), epoch_end=True)
            b = consumer.next(timeout=10)
            assert b.tensor("x").dtype == torch.bfloat16
            assert torch.equal(b.tensor("x"), x)
            assert torch.equal(b.tensor("y"), y)
            assert torch.equal(b.tensor("z"), z)
            assert b.array("x").dtype == np.uint16  # numpy sees the raw bfloat16 bits
            b.release()


def test_batches_that_do_not_match_the_layout_are_refused(tsock, endpoint):
    good = (np.zeros((4, 2), np.float32), np.zeros(4, np.int64))
    with tsock.Producer(endpoint, batch_size=4, slots=2, timeout=0) as producer:
        producer.start(good)
        with pytest.raises(ValueError, match="layout"):
            producer.publish((np.zeros((4, 3), np.float32), np.zeros(4, np.int64)))
        with pytest.raises(ValueError, match="layout"):
            producer.publish((np.zeros((4, 2), np.float64), np.zeros(4, np.int64)))
        with pytest.raises(ValueError, match="1..4 samples"):
            producer.publish((np.zeros((5, 2), np.float32), np.zeros(5, np.int64)))
        with pytest.raises(ValueError, match="disagree"):
            producer.publish((np.zeros((4, 2), np.float32), np.zeros(3, np.int64)))
        with pytest.raises(ValueError, match="stream has 2"):
            producer.publish((np.zeros((4, 2), np.float32),))
        with pytest.raises(TypeError, match="cannot carry"):
            tsock.Producer(endpoint, batch_size=4).start((np.zeros(4, np.complex64),))
        # None of the refused batches kept a slot: both slots can still be filled at once.
        producer.publish(good)
        producer.publish(good)
        assert producer.stats()["batches"] == 2


def test_one_shot_iterable_cannot_serve_two_epochs(tsock, endpoint):
    gen = ((np.zeros((2, 2), np.uint8),) for _ in range(3))
    with tsock.Producer(endpoint, batch_size=2) as producer:
        with pytest.raises(ValueError, match="one-shot"):
            producer.run(gen, epochs=2)
        assert producer.stats()["batches"] == 3


def test_wait_consumers_times_out(tsock, endpoint):
    with tsock.Producer(endpoint, batch_size=2) as producer:
        with pytest.raises(tsock.TsockError) as info:
            producer.stats()  # not started: no layout yet
        assert info.value.code == tsock.E_STATE
        producer.start((np.zeros((2, 2), np.uint8),))
        with pytest.raises(tsock.TsockError) as info:
            producer.wait_consumers(1, timeout=0.3)
        assert isinstance(info.value, tsock.Timeout) and info.value.code == -110


def test_second_producer_on_a_busy_endpoint(tsock, endpoint):
    batch = (np.zeros((2, 2), np.uint8),)
    with tsock.Producer(endpoint, batch_size=2) as first:
        first.start(batch)
        second = tsock.Producer(endpoint, batch_size=2)
        with pytest.raises(tsock.TsockError) as info:
            second.start(batch)
        assert info.value.code == tsock.E_BUSY_ENDPOINT
        assert info.value.name == "TSOCK_E_BUSY_ENDPOINT"
        assert tsock.strerror(tsock.E_BUSY_ENDPOINT) in str(info.value)


def test_closing_without_finish_stops_consumers(tsock, endpoint):
    batch = (np.zeros((2, 2), np.uint8),)
    producer = tsock.Producer(endpoint, batch_size=2)
    producer.start(batch)
    with _connect(tsock, producer, endpoint) as consumer:
        producer.close()
        with pytest.raises(tsock.ProducerStopped) as info:
            consumer.next(timeout=10)
        assert info.value.code == tsock.E_PRODUCER_STOPPED


def test_finish_ends_the_stream_after_the_batches_sent(tsock, endpoint):
    batch = (np.arange(4, dtype=np.int64),)
    producer = tsock.Producer(endpoint, batch_size=4)
    producer.start(batch)
    with tsock.DataLoader(endpoint, timeout=10, output="numpy") as loader:
        producer.wait_consumers(1, timeout=10)
        producer.publish(batch)
        producer.publish(batch, epoch_end=True)
        producer.finish()
        producer.close()
        # Copies: a batch's views are released when the next is asked for, and once the
        # stream has ended and nothing is held the consumer unmaps the ring (reading the
        # views after list() crashed now and then).
        (a,), (b,) = [tuple(x.copy() for x in item) for item in loader]
        assert np.array_equal(a, np.arange(4)) and np.array_equal(b, np.arange(4))
        with pytest.raises(tsock.EndOfStream):
            list(loader)


def _held_by_consumers(producer):
    s = producer.stats()
    return s["held"], s["consumers"]


@pytest.mark.parametrize("how", ["with", "close", "del"])
def test_slots_freed_after_an_exception_in_the_loop(tsock, endpoint, how):
    """A consumer holding slots (batches sent and not released) frees all of them when it
    is closed: by the with block an exception leaves, by close(), or by garbage collection.
    The producer side proves it: every slot can then be acquired without waiting."""
    slots = 4
    batch = (np.zeros((2, 3), np.uint8), np.zeros(2, np.int64))
    with tsock.Producer(endpoint, batch_size=2, slots=slots, timeout=0) as producer:
        producer.start(batch)
        loader = tsock.DataLoader(endpoint, timeout=10)
        producer.wait_consumers(1, timeout=10)
        for _ in range(3):
            producer.publish(batch)
        # All 3 were sent to the consumer, so it holds all 3 until it releases them.
        wait_until(lambda: _held_by_consumers(producer) == (3, 1), 10, "3 slots held")

        def train():
            for n, _ in enumerate(loader):
                if n == 1:
                    raise RuntimeError("boom")

        if how == "with":
            with pytest.raises(RuntimeError):
                with loader:
                    train()
        else:
            with pytest.raises(RuntimeError):
                train()
            assert loader.stats()["held"] == 1  # only the batch of the failing step
            if how == "close":
                loader.close()
            else:
                del loader
                gc.collect()
        wait_until(lambda: _held_by_consumers(producer) == (0, 0), 10,
                   "the producer to get every slot back")
        for _ in range(slots):  # timeout=0: raises tsock.Timeout if a slot were still held
            producer.publish(batch)


def test_free_mode_drop_last_refused_and_len_learnt(tsock, endpoint):
    """A producer publishing its own batches (no sampler): the library refuses drop_last,
    len() is learnt from the first epoch end, and a mid-epoch joiner's first epoch is partial."""
    def batch(start):
        return {"image": np.full((4, 2), start, np.uint8), "index": np.arange(start, start + 4)}

    with tsock.Producer(endpoint, batch_size=4, slots=4) as producer:
        producer.start(batch(0))
        with pytest.raises(ValueError, match="drop_last=True needs a producer with a sampler"):
            tsock.DataLoader(endpoint, drop_last=True, timeout=10)
        with tsock.DataLoader(endpoint, timeout=10, output="numpy") as loader:
            producer.wait_consumers(1, timeout=10)
            assert loader.consumer.dataset_size == 0
            assert loader.consumer.batches_per_epoch == 0
            with pytest.raises(TypeError, match="samples="):
                len(loader)
            producer.publish(batch(0))
            producer.publish(batch(4), epoch_end=True)
            items = list(loader)
            assert [i.tolist() for _, i in items] == [[0, 1, 2, 3], [4, 5, 6, 7]]
            assert len(loader) == 2 and not loader.partial_epoch
            producer.publish(batch(8))  # epoch 1 begins before the next consumer joins
            with tsock.DataLoader(endpoint, timeout=10, output="numpy") as late:
                producer.wait_consumers(2, timeout=10)
                producer.publish(batch(12), epoch_end=True)
                got = [i.tolist() for _, i in late]
                assert got == [[12, 13, 14, 15]]  # the rest of the producer's epoch
            assert [i.tolist() for _, i in loader] == [[8, 9, 10, 11], [12, 13, 14, 15]]
            assert loader.epoch == 1


def test_free_mode_joiner_sees_partial_epoch(tsock, endpoint):
    """A consumer joining Producer.run()'s stream in the middle of epoch 1 sees the producer's
    epoch and position on its batches (tsock_slot_set_epoch: "consumers see these"), so its
    first epoch is known to be partial; the next one is complete and numbered 2."""
    def batch(start):
        return {"image": np.full((4, 2), start, np.uint8), "index": np.arange(start, start + 4)}

    with tsock.Producer(endpoint, batch_size=4, slots=8) as producer:
        producer.start(batch(0))
        with tsock.DataLoader(endpoint, timeout=10, output="numpy") as first:
            producer.wait_consumers(1, timeout=10)
            producer.publish(batch(0))
            producer.publish(batch(4), epoch_end=True)
            producer.publish(batch(8))
            with tsock.DataLoader(endpoint, timeout=10, output="numpy") as late:
                producer.wait_consumers(2, timeout=10)
                producer.publish(batch(12), epoch_end=True)
                assert [i.tolist() for _, i in late] == [[12, 13, 14, 15]]
                assert late.partial_epoch and late.epoch == 1
                producer.publish(batch(16))
                producer.publish(batch(20), epoch_end=True)
                assert [i.tolist() for _, i in late] == [[16, 17, 18, 19], [20, 21, 22, 23]]
                assert not late.partial_epoch and late.epoch == 2
                assert len(late) == 2
            assert [i.tolist() for _, i in first] == [[0, 1, 2, 3], [4, 5, 6, 7]]
            assert first.epoch == 0 and not first.partial_epoch


class _Squares:
    """A map-style dataset: sample i is an image filled with i % 251 and the label i."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"image": np.full((3, 2), i % 251, np.uint8), "label": i}


def test_serve_dataset_gives_a_late_joiner_exact_epochs(tsock, endpoint):
    """Producer.serve(dataset) uses the library's sampler: a consumer that joins mid-epoch gets
    every sample exactly once per epoch of its own, at its own batch size, as with
    tsock-producer (unlike run(), whose free-mode stream only the producer's marks divide)."""
    import threading

    samples, results = 100, {}
    producer = tsock.Producer(endpoint, batch_size=8, slots=4)
    served = []
    server = threading.Thread(target=lambda: served.append(
        producer.serve(_Squares(samples), epochs=3, seed=5, wait_consumers=1)))
    server.start()
    try:
        # The producer serves 3 epochs (300 samples) and ends the stream, so b's two epochs
        # must start within the first 100: a waits, once it has 24 samples, until b has joined
        # (the ring, 4 slots, then holds the producer at most 32 samples ahead), and neither
        # is paused between epochs (a long grace), which would move it on in the stream.
        b_joined = threading.Event()

        def consume(name, batch_size, epochs, started=None, joined=None):
            got = []
            with tsock.DataLoader(endpoint, batch_size=batch_size, timeout=20, output="numpy",
                                  epoch_grace=30) as loader:
                if joined is not None:
                    joined.set()
                for _ in range(epochs):
                    epoch = []
                    for images, labels in loader:
                        assert (images[:, 0, 0] == labels % 251).all(), "bytes and label"
                        epoch += [int(v) for v in labels]
                        if started is not None and len(epoch) >= 24 and not started.is_set():
                            started.set()
                            assert b_joined.wait(20), "the second consumer never joined"
                    got.append(epoch)
            results[name] = got

        first_batches = threading.Event()
        a = threading.Thread(target=consume, args=("a", 8, 3, first_batches))
        a.start()
        assert first_batches.wait(20), "the first consumer got no batches"
        # b joins in the middle of the first consumer's first epoch
        consume("b", 11, 2, joined=b_joined)
        a.join(30)
        server.join(30)
    finally:
        if server.is_alive():
            server.join(5)
        producer.close()
    assert served and served[0] == 3 * 13  # 12 full batches and one of 4 per epoch
    for name, epochs in (("a", 3), ("b", 2)):
        assert len(results[name]) == epochs
        for epoch in results[name]:
            assert sorted(epoch) == list(range(samples)), f"consumer {name}: not exact"
    assert results["b"][0][:1] != results["a"][0][:1], "b joined late, not at the start"
