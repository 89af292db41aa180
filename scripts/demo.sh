#!/usr/bin/env bash
# The main job on built-in sample data: one producer, three consumers, one shared pipeline.
#
#   bash scripts/demo.sh
#
# Installs what is missing, builds the programs (build/normal, the same build directory as
# scripts/test.sh), writes a small ImageNet-shaped tree of JPEGs with tsock-mkdataset (once,
# into build/demo-data), then starts one producer that reads, decodes and augments it
# (RandomResizedCrop 224 + flip, on one worker thread per core) and three verifying consumers
# that train at different speeds (--delay-ms). Each consumer checks the sample ids and labels
# of every batch and that each epoch holds every sample exactly once; the script prints what
# each one received and what the producer did: every image decoded once, for all three.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
JOBS=${TSOCK_JOBS:-2}
BUILD=$ROOT/build/normal

# What the producer serves. To demo another dataset, change these lines (for example
# DATASET_ARGS=(--dataset imagenet --root /data/imagenet) and SAMPLES to its file count).
SAMPLES=640
DATA=$ROOT/build/demo-data
DATASET_ARGS=(--dataset imagenet --root "$DATA" --image-size 224)
BATCH_SIZE=32
SLOTS=8
EPOCHS=2
DELAYS_MS=(0 2 5) # one consumer per entry: its simulated training step per batch

section() { printf '\n========== %s ==========\n' "$*"; }

section "dependencies"
# shellcheck source=scripts/deps.sh
source "$ROOT/scripts/deps.sh"
tsock_install_deps

section "build"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTSOCK_SANITIZE=
cmake --build "$BUILD" -j"$JOBS" --target tsock-producer tsock-consume tsock-mkdataset
PRODUCER=$(find "$BUILD" -type f -name tsock-producer -perm -u+x -print -quit)
CONSUME=$(find "$BUILD" -type f -name tsock-consume -perm -u+x -print -quit)
MKDATASET=$(find "$BUILD" -type f -name tsock-mkdataset -perm -u+x -print -quit)

section "sample data"
if [ ! -f "$DATA/.complete" ]; then
    rm -rf "$DATA"
    "$MKDATASET" "$DATA" --images "$SAMPLES" --classes 10 --seed 1
    touch "$DATA/.complete"
else
    echo "using $DATA (written by an earlier run)"
fi

RUN=$(mktemp -d "${TMPDIR:-/tmp}/tsock-demo.XXXXXX")
PIDS=()
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    rm -rf "$RUN"
}
trap cleanup EXIT
ENDPOINT="ipc://$RUN/demo.sock"

section "run: 1 producer, ${#DELAYS_MS[@]} consumers, $EPOCHS epochs"
echo "producer: ${DATASET_ARGS[*]} --batch-size $BATCH_SIZE --slots $SLOTS --epochs $EPOCHS"
timeout 600 "$PRODUCER" "${DATASET_ARGS[@]}" --endpoint "$ENDPOINT" --batch-size "$BATCH_SIZE" \
    --slots "$SLOTS" --epochs "$EPOCHS" --wait-consumers "${#DELAYS_MS[@]}" \
    --stats-json "$RUN/producer.json" &
producer_pid=$!
PIDS+=("$producer_pid")

consumer_pids=()
for i in "${!DELAYS_MS[@]}"; do
    echo "consumer $i: --delay-ms ${DELAYS_MS[$i]} --epochs $EPOCHS"
    timeout 600 "$CONSUME" --endpoint "$ENDPOINT" --epochs "$EPOCHS" --samples "$SAMPLES" \
        --content images --delay-ms "${DELAYS_MS[$i]}" --name "consumer$i" --json >"$RUN/consumer$i.json" &
    consumer_pids+=($!)
    PIDS+=($!)
done

status=0
for i in "${!consumer_pids[@]}"; do
    if ! wait "${consumer_pids[$i]}"; then
        echo "consumer $i failed" >&2
        status=1
    fi
done
if ! wait "$producer_pid"; then
    echo "producer failed" >&2
    status=1
fi

section "what each process did"
python3 - "$RUN" "$EPOCHS" "${DELAYS_MS[@]}" <<'PY' || status=1
import json, os, sys

run, epochs, delays = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def load(name):
    path = os.path.join(run, name)
    try:
        with open(path) as f:
            text = f.read().strip()
        try:
            return json.loads(text)
        except ValueError:
            # Something printed before the object: take the object on the last line.
            return json.loads(text.splitlines()[-1])
    except (OSError, ValueError) as e:
        print(f"{name}: no readable JSON ({e})")
        return None

cols = ["consumer", "delay_ms", "batches", "samples", "epochs", "label_err", "dupes",
        "missing", "wait_s", "next p50 us", "next p99 us"]
rows, ok = [], True
for i, delay in enumerate(delays):
    c = load(f"consumer{i}.json")
    if c is None:
        ok = False
        continue
    lat = c.get("next_latency_us", {})
    rows.append([str(i), delay, c.get("batches"), c.get("samples"), c.get("epochs"),
                 c.get("label_errors"), c.get("duplicates"), c.get("missing"),
                 f"{c.get('wait_s', 0):.3f}", f"{lat.get('p50', 0):.1f}",
                 f"{lat.get('p99', 0):.1f}"])
    ok &= (c.get("label_errors") == 0 and c.get("duplicates") == 0
           and c.get("missing") == 0 and c.get("epochs") == epochs)
widths = [max(len(str(x)) for x in col) for col in zip(cols, *rows)]
for r in [cols] + rows:
    print("  ".join(str(x).rjust(w) for x, w in zip(r, widths)))
print("(wait_s and next latency: time blocked in next(). Decoding JPEGs on this machine's cores\n"
      " sets the pace here; consumers also drift apart by at most the slot count)")

p = load("producer.json")
if p is None:
    ok = False
else:
    pl = p.get("pipeline") or {}
    print(f"\nproducer: {p.get('batches')} batches, {p.get('samples')} samples, "
          f"cpu {p.get('cpu_s', 0):.3f} s, wall {p.get('wall_s', 0):.3f} s")
    if pl:
        per_image = 1e3 * p.get("cpu_s", 0) / max(1, p.get("samples", 1))
        print(f"  read {pl.get('files_read')} files ({pl.get('bytes_read', 0) / 1e6:.1f} MB, "
              f"{pl.get('read_mode')}), decoded on {pl.get('workers')} workers: "
              f"{per_image:.2f} ms of CPU per image")
    print("  (each batch was produced once and read in place by every consumer)")

if ok:
    print(f"\nOK: every consumer received all {epochs} epochs, each sample exactly once per "
          "epoch, with its label")
else:
    print("\nFAILED: a program gave no figures, or a consumer missed, repeated or corrupted "
          "samples (see above)")
sys.exit(0 if ok else 1)
PY
exit "$status"
