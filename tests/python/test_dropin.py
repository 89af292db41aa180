"""tsock.DataLoader dropped into a torch training script (issue 22): the attributes scripts read,
torch's arguments accepted, ranks never duplicated silently, a loop left early costing other
jobs nothing, and errors that say what to start or check. Real producers, real torch."""
import warnings

import numpy as np
import pytest

from tsock_testutil import as_numpy, start_producer


def ids_of(item):
    return as_numpy(item[-1]).copy()


def read_epoch_ids(loader):
    out = [ids_of(item) for item in loader]
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def test_dataset_batch_size_drop_last_sampler(tsock, programs, procs, endpoint):
    start_producer(programs, procs, endpoint, batch_size=10, samples=47, epochs=0)
    with tsock.DataLoader(endpoint, batch_size=8, drop_last=True, timeout=20) as loader:
        assert len(loader.dataset) == 47
        assert loader.batch_size == 8 and loader.drop_last is True
        assert len(loader) == 5  # 47 // 8
        assert len(loader.sampler) == 47
        loader.sampler.set_epoch(0)
        assert loader.requested_epoch == 0
        # A synthetic dataset has no class names: said so, not an empty list.
        with pytest.raises(AttributeError, match="no class names"):
            loader.dataset.classes


def test_torch_only_arguments_warned_once_and_ignored(tsock, programs, procs, endpoint,
                                                      monkeypatch):
    import tsock._dropin as dropin
    monkeypatch.setattr(dropin, "_warned_args", set())
    start_producer(programs, procs, endpoint, batch_size=10, samples=30, epochs=0)
    args = dict(num_workers=8, pin_memory=True, shuffle=True, sampler=object(),
                prefetch_factor=4, persistent_workers=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = tsock.DataLoader(endpoint, timeout=20, **args)
        second = tsock.DataLoader(endpoint, timeout=20, **args)  # no second warning
    texts = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    for name in args:
        assert sum(f"ignores {name}=" in t for t in texts) == 1, (name, texts)
    assert len(texts) == len(args)
    assert sum(len(x) for x, _ in loader) == 30  # and it reads as ever
    assert [c["name"] for c in tsock.query_stats(endpoint)["consumers"]] == ["", ""]
    loader.close()
    second.close()


def test_collate_fn_mixup_gets_samples(tsock, programs, procs, endpoint):
    torch = pytest.importorskip("torch")
    from torch.utils.data import default_collate
    v2 = pytest.importorskip("torchvision.transforms.v2")
    start_producer(programs, procs, endpoint, batch_size=10, samples=30, image_size=8,
                   epochs=0)
    mixup = v2.MixUp(num_classes=1000, alpha=0.2)
    seen = []

    def collate(batch):
        seen.append(len(batch))
        images, labels = default_collate(batch)  # torch's own: a list of (image, label)
        images = images.permute(0, 3, 1, 2).float().div(255)
        return mixup(images, labels)

    with tsock.DataLoader(endpoint, timeout=20, collate_fn=collate) as loader:
        out = [b for b in loader]
    assert seen == [10, 10, 10]
    images, labels = out[0]
    assert images.shape == (10, 3, 8, 8) and images.dtype == torch.float32
    assert labels.shape == (10, 1000)  # mixed one-hot targets


def test_collate_fn_must_be_callable(tsock, programs, procs, endpoint):
    with pytest.raises(TypeError, match="collate_fn must be callable"):
        tsock.DataLoader(endpoint, timeout=1, collate_fn=3)


@pytest.mark.parametrize("env", [{"RANK": "1", "WORLD_SIZE": "2"},
                                 {"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}])
def test_ranks_without_group_refused(tsock, programs, procs, endpoint, monkeypatch, env):
    for var in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    with pytest.raises(ValueError, match=r"group='my-job'.*group=False"):
        tsock.DataLoader(endpoint, timeout=1)
    start_producer(programs, procs, endpoint, batch_size=10, samples=20, epochs=0)
    with tsock.DataLoader(endpoint, timeout=20, group=False) as loader:  # the opt-out
        assert sum(len(x) for x, _ in loader) == 20


def test_single_rank_environment_is_fine(tsock, programs, procs, endpoint, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    start_producer(programs, procs, endpoint, batch_size=10, samples=20, epochs=0)
    with tsock.DataLoader(endpoint, timeout=20) as loader:
        assert sum(len(x) for x, _ in loader) == 20


def test_no_producer_names_the_endpoint(tsock, endpoint):
    with pytest.raises(tsock.Timeout) as info:
        tsock.DataLoader(endpoint, timeout=0.3)
    text = str(info.value)
    assert endpoint in text and "tsock-producer" in text and "Connection timed out" not in text


def test_end_of_stream_says_epochs_and_how(tsock, programs, procs, endpoint):
    start_producer(programs, procs, endpoint, batch_size=10, samples=20, epochs=1)
    with tsock.DataLoader(endpoint, timeout=20) as loader:
        assert sum(len(x) for x, _ in loader) == 20
        with pytest.raises(tsock.EndOfStream) as info:
            for _ in loader:
                pass
    text = str(info.value)
    assert "after 1 epochs" in text and "--epochs 0" in text and endpoint in text


def test_break_pauses_and_other_jobs_never_wait(tsock, programs, procs, endpoint):
    """Job A leaves its loop after 2 batches and does not read for a while; job B must read two
    whole epochs meanwhile (before: A's 4 queued batches held every slot and B timed out).
    Then A's next loop is a fresh, exact epoch."""
    start_producer(programs, procs, endpoint, batch_size=10, samples=100, epochs=0, slots=4)
    a = tsock.DataLoader(endpoint, return_ids=True, timeout=20, epoch_grace=30)
    first = []
    for n, item in enumerate(a):
        first.append(ids_of(item))
        if n == 1:
            break
    assert len(np.unique(np.concatenate(first))) == 20
    with tsock.DataLoader(endpoint, return_ids=True, timeout=20, epoch_grace=30) as b:
        for _ in range(2):
            assert sorted(read_epoch_ids(b).tolist()) == list(range(100))
    ids = read_epoch_ids(a)
    assert sorted(ids.tolist()) == list(range(100)) and a.epoch == 1
    a.close()


def test_same_iterator_continues_with_exactly_the_rest(tsock, programs, procs, endpoint):
    """Reading on from the same iterator after a pause (the library's own, once the job has
    not asked for a batch for a while): the rest of that epoch exactly, then epoch 1."""
    start_producer(programs, procs, endpoint, batch_size=10, samples=100, epochs=0, slots=4)
    a = tsock.DataLoader(endpoint, return_ids=True, timeout=20, epoch_grace=0.05)
    it = iter(a)
    got = [ids_of(next(it)) for _ in range(3)]
    with tsock.DataLoader(endpoint, return_ids=True, timeout=20, epoch_grace=30) as b:
        for _ in range(2):  # A holds nothing now: B is never kept waiting
            assert sorted(read_epoch_ids(b).tolist()) == list(range(100))
    got += [ids_of(item) for item in it]
    ids = np.concatenate(got)
    assert sorted(ids.tolist()) == list(range(100)) and a.epoch == 0
    assert sorted(read_epoch_ids(a).tolist()) == list(range(100)) and a.epoch == 1
    a.close()


def test_producer_log_names_a_lost_consumer(tsock, programs, procs, endpoint):
    """A job killed with SIGKILL: the producer's log names it by its name and pid, not by a
    socket errno ("No route to host", before)."""
    import signal
    import subprocess
    from tsock_testutil import wait_until
    prod = subprocess.Popen(
        [programs["tsock-producer"], "--dataset", "synthetic", "--endpoint", endpoint,
         "--batch-size", "10", "--samples", "100", "--image-size", "8", "--slots", "4",
         "--heartbeat-ms", "100", "--heartbeat-timeout-ms", "1000", "--verbose"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    procs.append(prod)
    victim = subprocess.Popen(
        [programs["tsock-consume"], "--endpoint", endpoint, "--name", "victim-job",
         "--epochs", "0", "--delay-ms", "20", "--quiet"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.append(victim)

    def victim_reads():
        try:
            st = tsock.query_stats(endpoint, timeout=2)
        except tsock.TsockError:
            return False
        return any(c.get("name") == "victim-job" and c.get("batches", 0) > 0
                   for c in st["consumers"])

    wait_until(victim_reads, 30, "the victim reading")
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    with tsock.DataLoader(endpoint, timeout=20, epoch_grace=30) as loader:
        for _ in range(3):  # long enough for the producer to find the victim gone
            assert sum(len(x) for x, _ in loader) == 100
    prod.send_signal(signal.SIGTERM)
    _, err = prod.communicate(timeout=20)
    lines = [line for line in err.splitlines() if "victim-job" in line]
    assert lines and all(f"pid {victim.pid}" in line for line in lines), err
    assert any("gone" in line or "timed out" in line for line in lines), err
    assert "No route to host" not in err, err


def test_example_normalises_as_the_presets_do(tsock):
    """examples/python/train.py's to_model_input: a uint8 NHWC batch becomes what torchvision's
    presets make of it (ToTensor + Normalize with ImageNet's statistics); a converted
    producer's float NCHW batch is used as it is. The docs' snippet is the same expression."""
    import importlib.util
    import os
    torch = pytest.importorskip("torch")
    transforms = pytest.importorskip("torchvision.transforms")
    path = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python", "train.py")
    spec = importlib.util.spec_from_file_location("example_train", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    batch = torch.randint(0, 256, (4, 6, 5, 3), dtype=torch.uint8)
    preset = transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    expect = torch.stack([preset(img.permute(2, 0, 1).float() / 255) for img in batch])
    got = example.to_model_input(batch, "cpu")
    assert got.shape == (4, 3, 6, 5) and torch.allclose(got, expect, atol=1e-6)
    assert example.to_model_input(expect, "cpu") is expect or torch.equal(
        example.to_model_input(expect, "cpu"), expect)
