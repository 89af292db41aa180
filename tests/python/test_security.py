"""Who may connect, from Python: CURVE key pairs from tsock.curve_keygen, a keyed
tsock-producer over tcp://127.0.0.1, DataLoader / query_stats with and without the right keys,
a keyed Python Producer, the network refusal and bad key files."""
import os
import socket
import stat

import numpy as np
import pytest

from tsock_testutil import as_numpy, start_producer


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def keys(tsock, tmp_path):
    """Three key pairs (server, client, intruder) and an authorized-keys file with the client."""
    out = {}
    for name in ("server", "client", "intruder"):
        secret, public = tmp_path / f"{name}.key_secret", tmp_path / f"{name}.key"
        tsock.curve_keygen(secret, public)
        out[name] = (str(secret), str(public))
    authorized = tmp_path / "authorized_keys"
    authorized.write_text("# training jobs\n" + open(out["client"][1]).read())
    out["authorized"] = str(authorized)
    return out


def test_keygen_files(tsock, keys):
    secret, public = keys["server"]
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(public).st_mode) == 0o644
    for path in (secret, public):
        data = open(path, "rb").read()
        assert len(data) == 41 and data.endswith(b"\n")
    with pytest.raises(tsock.TsockError) as info:
        tsock.curve_keygen(secret, public)
    assert info.value.errno == 17  # EEXIST: an existing key is never replaced


def test_keyed_loader_gets_exact_epochs_and_others_nothing(tsock, programs, procs, keys):
    ep = f"tcp://127.0.0.1:{free_port()}"
    srv, cli, bad = keys["server"], keys["client"], keys["intruder"]
    prod = start_producer(programs, procs, ep, batch_size=16, samples=100, epochs=2,
                          extra=("--curve-secret-key", srv[0],
                                 "--curve-authorized-keys", keys["authorized"]))
    # Neither a wrong key, nor another server key, nor no key gets anything: the handshake is
    # refused, which the client sees and reports as E_AUTH.
    for curve in ((bad[0], srv[1]), (cli[0], bad[1]), None):
        with pytest.raises(tsock.TsockError) as info:
            tsock.DataLoader(ep, timeout=20, curve=curve)
        assert info.value.code == tsock.E_AUTH
        with pytest.raises(tsock.TsockError) as info:
            tsock.query_stats(ep, timeout=20, curve=curve)
        assert info.value.code == tsock.E_AUTH
    snap = tsock.query_stats(ep, timeout=10, curve=(cli[0], srv[1]))
    assert snap["endpoint"] == ep and snap["producer"]["joined"] == 0
    with tsock.DataLoader(ep, return_ids=True, timeout=20, curve=(cli[0], srv[1])) as loader:
        for epoch in range(2):
            ids = np.concatenate([as_numpy(b[2]).copy() for b in loader])  # views: copy
            assert sorted(ids.tolist()) == list(range(100)), f"epoch {epoch} not exact"
    assert prod.wait(timeout=20) == 0
    assert "is not authorized" in prod.stderr.read()


def test_python_producer_with_keys(tsock, keys):
    ep = f"tcp://127.0.0.1:{free_port()}"
    srv, cli = keys["server"], keys["client"]
    example = {"x": np.zeros((4, 3), np.float32)}
    with tsock.Producer(ep, batch_size=4, slots=2, curve=(srv[0], keys["authorized"])) as p:
        p.start(example)
        snap = tsock.query_stats(ep, timeout=10, curve=(cli[0], srv[1]))
        assert snap["endpoint"] == ep
        with pytest.raises(tsock.TsockError) as info:
            tsock.query_stats(ep, timeout=20)
        assert info.value.code == tsock.E_AUTH


def test_network_endpoint_needs_keys_or_the_opt_out(tsock, keys):
    example = {"x": np.zeros((4, 3), np.float32)}
    ep = f"tcp://0.0.0.0:{free_port()}"
    with tsock.Producer(ep, batch_size=4, slots=2) as p:
        with pytest.raises(tsock.TsockError) as info:
            p.start(example)
    assert info.value.code == tsock.E_INSECURE and "authentication" in str(info.value)
    with tsock.Producer(ep, batch_size=4, slots=2, insecure_open_to_network=True) as p:
        p.start(example)
    with tsock.Producer(ep, batch_size=4, slots=2,
                        curve=(keys["server"][0], keys["authorized"])) as p:
        p.start(example)


def test_bad_key_arguments(tsock, keys, tmp_path):
    srv = keys["server"]
    loose = tmp_path / "loose.key_secret"
    loose.write_bytes(open(keys["client"][0], "rb").read())
    loose.chmod(0o644)
    garbage = tmp_path / "garbage.key_secret"
    garbage.write_bytes(b"x" * 12)
    garbage.chmod(0o600)
    ep = f"tcp://127.0.0.1:{free_port()}"
    cases = [(str(tmp_path / "missing"), 2, "do not exist"), (str(loose), 13, "chmod 600"),
             (str(garbage), 22, "40 Z85 characters")]
    for path, err, hint in cases:
        with pytest.raises(tsock.TsockError) as info:
            tsock.Consumer(ep, timeout=1, curve=(path, srv[1]))
        assert info.value.errno == err and path in str(info.value) and hint in str(info.value)
        with pytest.raises(tsock.TsockError) as info:
            tsock.query_stats(ep, timeout=1, curve=(path, srv[1]))
        assert info.value.errno == err and path in str(info.value)
        with tsock.Producer(ep, batch_size=4, slots=2, curve=(path, keys["authorized"])) as p:
            with pytest.raises(tsock.TsockError) as info:
                p.start({"x": np.zeros((4, 3), np.float32)})
        assert info.value.errno == err and path in str(info.value)
    for curve in ("just-one-path", (srv[0],), (srv[0], "")):
        with pytest.raises(ValueError):
            tsock.DataLoader(ep, timeout=1, curve=curve)
