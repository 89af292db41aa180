#!/usr/bin/env bash
# GPU check of the manylinux wheel (scripts/wheel.sh): installed into a fresh venv on a machine
# with an NVIDIA GPU, it finds CUDA at run time (the driver, not bundled): build_info() says
# cuda, a device is counted, and a GPU ring served by the wheel's tsock-producer is read by its
# tsock-consume and by tsock.DataLoader (device="cuda" when torch has CUDA), one exact epoch each.
#
#   scripts/wheel.sh dist && bash scripts/wheel-gpu-check.sh dist/tsock-*manylinux*.whl
#
# Leaves nothing behind but its venv in /tmp/tsock-wheel-venv (removed at the end).
WHEEL=${1:?usage: wheel-gpu-check.sh WHEEL}
set -x
nvidia-smi -L
python3 --version
python3 -c "import numpy, torch; print('torch', torch.__version__, torch.cuda.is_available())"
V=/tmp/tsock-wheel-venv
rm -rf $V
python3 -m venv --system-site-packages $V || exit 1
trap 'rm -rf $V' EXIT
$V/bin/pip install --no-deps --no-index "$WHEEL" || exit 1
cd /tmp
$V/bin/python -c "import tsock; print(tsock.library_path); print(tsock.build_info()); print('devices', tsock.cuda_device_count())"
$V/bin/tsock-producer --version
ldd $V/lib/python3*/site-packages/tsock/libtsock.so.0 | grep -E "zmq|uring|jpeg|png|cuda"
EP=ipc:///tmp/tsock-gpu-wheel.sock
serve() {
    timeout 120 $V/bin/tsock-producer --dataset synthetic --samples 512 --batch-size 32 --epochs 1 \
        --device cuda --wait-consumers 1 --endpoint $EP &
    P=$!
    sleep 2
}
serve
timeout 100 $V/bin/tsock-consume --endpoint $EP --samples 512 --epochs 1 --json | tail -c 700
wait $P; echo "producer exit $?"
serve
timeout 100 $V/bin/python - <<'PY'
import tsock
try:
    import torch
except ImportError:
    torch = None
dev = "cuda" if torch is not None and torch.cuda.is_available() else None
kw = {"device": dev} if dev else {}
with tsock.DataLoader("ipc:///tmp/tsock-gpu-wheel.sock", return_ids=True, timeout=60, **kw) as l:
    ids = []
    for item in l:
        t = item[-1]
        if not ids:
            print("first batch:", [getattr(x, "device", "numpy") for x in item])
        ids += [int(v) for v in (t.cpu().numpy() if hasattr(t, "cpu") else t).tolist()]
    print("epoch exact:", sorted(ids) == list(range(512)), len(ids))
PY
wait $P; echo "producer exit $?"
