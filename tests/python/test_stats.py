"""Statistics from Python: a consumer's own figures, a producer's application status, and
tsock.query_stats against the real tsock-producer program and against no producer at all."""
import errno
import os
import socket

import numpy as np
import pytest

from tsock_testutil import start_producer, wait_until


def test_consumer_own_figures_reach_the_producer(tsock, programs, procs, endpoint):
    start_producer(programs, procs, endpoint, batch_size=16, samples=100, epochs=0)
    with tsock.DataLoader(endpoint, name="py-job", timeout=20, epoch_grace=0.05) as loader:
        for _ in range(2):
            assert sum(1 for _ in loader) == 7
        own = loader.stats()
        assert own["batches"] == 14 and own["samples"] == 200 and own["epochs"] == 2
        assert own["wait_s"] >= 0.0 and own["held"] == 0

        def settled():
            snap = tsock.query_stats(endpoint, timeout=10)
            cons = snap["consumers"]
            # Lingering past the grace period pauses it; its report follows every heartbeat.
            if len(cons) == 1 and cons[0]["paused"] and cons[0]["consumed_batches"] == 14:
                return snap
            return None

        snap = wait_until(settled, 20, "the consumer's own figures at the producer")
        (c,) = snap["consumers"]
        assert c["name"] == "py-job" and c["pid"] == os.getpid()
        assert c["reported"] and c["consumed_samples"] == 200 and c["epochs"] == 2
        assert c["held"] == 0 and c["batches"] >= 14 and c["released"] == c["batches"]
        assert snap["producer"]["consumers"] == 1 and snap["producer"]["joined"] == 1
        assert snap["producer"]["slots"] == 8
        # tsock-producer publishes its status once per status interval (1 s): none before the
        # first one (a quick run), its own interval figures after it (a slower one).
        assert snap["status"] is None or snap["status"]["dataset"] == "synthetic"
        assert snap["endpoint"] == endpoint


def test_producer_status(tsock, endpoint):
    example = {"x": np.zeros((4, 3), np.float32)}
    with tsock.Producer(endpoint, batch_size=4, slots=2) as producer:
        with pytest.raises(tsock.TsockError):
            producer.set_status({"a": 1})  # not started yet
        producer.start(example)
        status = {"images_per_s": 12.5, "stage": "d\u00e9code", "workers": [1, 2]}
        producer.set_status(status)
        snap = tsock.query_stats(endpoint, timeout=10)
        assert snap["status"] == status
        assert snap["consumers"] == [] and snap["producer"]["joined"] == 0
        producer.set_status('{"from": "text"}')
        assert tsock.query_stats(endpoint, timeout=10)["status"] == {"from": "text"}
        for bad in ("[1]", "not json", '{"a":\n1}', '{"a": 1} trailing'):
            with pytest.raises(ValueError):
                producer.set_status(bad)
        with pytest.raises(ValueError, match="4096"):
            producer.set_status({"big": "x" * 5000})
        with pytest.raises(TypeError):
            producer.set_status([1, 2])
        with pytest.raises(ValueError):
            producer.set_status({"nan": float("nan")})  # not JSON
        producer.set_status(None)
        assert tsock.query_stats(endpoint, timeout=10)["status"] is None
        # The in-process view: Producer.stats() has the same per-consumer figures.
        with tsock.Consumer(endpoint, name="c1", timeout=10) as consumer:
            producer.wait_consumers(1, timeout=10)
            producer.publish({"x": np.ones((4, 3), np.float32)})
            batch = consumer.next(timeout=10)

            def reported():
                info = producer.stats()["consumers_info"]
                return info if info and info[0]["consumed_batches"] == 1 else None

            (info,) = wait_until(reported, 10, "the consumer's report")
            assert info["held"] == 1 and info["lag"] == 0 and info["paused"] is False
            assert info["consumed_samples"] == 4 and info["rate"] >= 0 and info["wait_s"] >= 0
            assert producer.stats()["slots"] == 2 and producer.stats()["free_slots"] == 1
            batch.release()


def test_query_without_producer(tsock, endpoint, tmp_path):
    with pytest.raises(tsock.TsockError) as info:
        tsock.query_stats(endpoint, timeout=0.2)  # no socket file at all
    assert info.value.code == -errno.ENOENT
    path = os.path.join(os.path.dirname(endpoint[len("ipc://"):]), "stale.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(path)
        s.listen(1)
        with pytest.raises(tsock.Timeout):
            tsock.query_stats("ipc://" + path, timeout=0.3)
    finally:
        s.close()
        os.unlink(path)
    with pytest.raises(ValueError):
        tsock.query_stats(endpoint, timeout=-1)
