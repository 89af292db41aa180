#!/usr/bin/env bash
# Validates tsock's GPU path on a machine with an NVIDIA GPU, in one command, and writes one
# report (docs/gpu.md says what has and has not run on real hardware; record the result there).
#
#   bash scripts/gpu-check.sh [--out DIR] [--quick] [--build DIR] [--no-install]
#                             [--photos DIR] [--step-timeout S] [--collocation "ARGS"]
#
# Steps (each one's log under DIR/logs; a failed step is reported and the rest still run):
#   1. checks the GPU is there (nvidia-smi) and installs what is missing: the build deps
#      (scripts/deps.sh: apt packages, numpy/pytest/torch/torchvision from PyPI), a CUDA
#      toolkit >= 12.0 when nvcc is absent (apt's nvidia-cuda-toolkit, else NVIDIA's PyPI
#      wheels nvidia-cuda-nvcc-cu12 + nvidia-cuda-runtime-cu12), and a torch built with CUDA
#      when the installed one has none;
#   2. builds (RelWithDebInfo, warnings as errors) and checks the build has the real runtime;
#   3. ctest -L gpu (must run, not skip), the Python binding's GPU tests with torch's CUDA
#      tensors (tests/python/test_cuda.py, must run, not skip) and ctest -L gpusim;
#   4. compute-sanitizer --tool memcheck, racecheck and synccheck on `gpu_ring content`;
#   5. tsock-bench-gpu;
#   6. the collocation benchmark with --device cuda: ResNet-18 and ResNet-50 jobs in mixed
#      precision, shared (one tsock-producer --device cuda) versus independent (torchvision
#      DataLoaders) loading, K = 1, 2, 4 jobs, at a fixed number of cores (--cpus, default: all);
#   7. writes DIR/gpu-check-report.json and DIR/gpu-check-report.md.
# --issue20: the GPU decoder's steps only (issue 20), within --budget S seconds (default 450)
#   from the start, for a machine lent for a fixed time: after the GPU and build checks,
#   ctest -L gpu and the GPU decoder's gpusim tests; an image tree (tsock-mkdataset, 2000 images
#   of --photos DIR, loudly synthetic without it); the pixels of the GPU decoder against the CPU
#   decoder on the same crops, train and val presets (tsock-bench-gpudecode: mean abs diff
#   <= 1.0, PSNR >= 40 dB); decode throughput and CPU ms/image of tsock --decoder cpu, --decoder
#   gpu, the torchvision GPU-decode peer and torchvision on the CPU, then collocation at 4 cores
#   (ResNet-18, MobileNetV3-Small; K = 1, 4; tsock shared with either decoder versus K
#   torchvision DataLoaders), jobs of 20 s spans (benchmarks/collocation/gpu_decode.py, cut at
#   the budget: the rows it had no time for say so). nvJPEG: TSOCK_NVJPEG_LIBRARY, else the
#   wheel given with --nvjpeg-wheel FILE (unpacked into DIR), else an installed nvidia-nvjpeg
#   wheel, else the CUDA toolkit's, else the copy torchvision bundles (said in the report).
# --quick: K = 1, 2, one epoch, 400 images and one repeat in step 6 (a smoke run).
# --build DIR: check an existing build of this checkout (configured with the CUDA toolkit)
#   instead of building one: for a GPU machine that runs what was built elsewhere.
# --no-install: install nothing (an offline machine): what is missing fails its step, said.
# --photos DIR: the photographs step 6 crops its images from (default: mate-backgrounds').
# --step-timeout S: a step still running after S seconds fails (default: none).
# --collocation "ARGS": step 6's sizes instead of the defaults (e.g. "--ks 1,4 --epochs 2
#   --images 3000 --repeat 1"); --quick's are "--ks 1,2 --epochs 1 --images 400 --repeat 1".
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$ROOT/build/gpu-check
QUICK=0 BUILD= INSTALL=1 PHOTOS= STEP_TIMEOUT= COLLOC_ARGS=
ISSUE20=0 BUDGET=450 NVJPEG_WHEEL=
START_S=$SECONDS
usage() {
    echo "usage: $0 [--out DIR] [--quick] [--build DIR] [--no-install] [--photos DIR]" \
        "[--step-timeout S] [--collocation ARGS] [--issue20 [--budget S] [--nvjpeg-wheel FILE]]" >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case $1 in
    --out) OUT=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --build) BUILD=$(cd "$2" && pwd) || usage; shift 2 ;;
    --no-install) INSTALL=0; shift ;;
    --photos) PHOTOS=$2; shift 2 ;;
    --step-timeout) STEP_TIMEOUT=$2; shift 2 ;;
    --collocation) COLLOC_ARGS=$2; shift 2 ;;
    --issue20) ISSUE20=1; shift ;;
    --budget) BUDGET=$2; shift 2 ;;
    --nvjpeg-wheel) NVJPEG_WHEEL=$(cd "$(dirname "$2")" && pwd)/$(basename "$2") || usage; shift 2 ;;
    *) usage ;;
    esac
done
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
PREBUILT=0
if [ -n "$BUILD" ]; then PREBUILT=1; else BUILD=$OUT/build; fi
LOGS=$OUT/logs
mkdir -p "$LOGS"
JOBS=$(nproc)
STEPS=() # "name|status|log|detail" per step, for the report

record() { STEPS+=("$1|$2|$3|$4"); echo "== $1: $2 ${4:+($4)}"; }

# step NAME LOG COMMAND...: runs it, logs its output, records PASS or FAIL. With
# --step-timeout, a step still running after that long is stopped, all of it (each step runs
# in its own process group), and fails.
step() {
    local name=$1 log=$LOGS/$2.log rc watchdog= t0=$SECONDS
    shift 2
    echo "== $name: $*"
    set -m
    "$@" >"$log" 2>&1 &
    local pid=$!
    if [ -n "$STEP_TIMEOUT" ]; then
        (
            sleep "$STEP_TIMEOUT"
            echo "gpu-check: step '$name' still running after $STEP_TIMEOUT s: stopped" >>"$log"
            kill -TERM -- -"$pid" 2>/dev/null
            sleep 10
            kill -KILL -- -"$pid" 2>/dev/null
        ) &
        watchdog=$!
    fi
    wait "$pid"
    rc=$?
    [ -n "$watchdog" ] && { kill -- -"$watchdog" && wait "$watchdog"; } 2>/dev/null
    set +m
    if [ "$rc" -eq 0 ]; then
        record "$name" PASS "$log" "$((SECONDS - t0)) s"
        return 0
    fi
    tail -n 30 "$log"
    record "$name" FAIL "$log" "exit $rc, $((SECONDS - t0)) s"
    return 1
}

# ---- 1. the GPU and what is missing ----------------------------------------------------------
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >"$LOGS/nvidia-smi.log" 2>&1; then
    echo "gpu-check: no NVIDIA GPU here (nvidia-smi missing or failing): nothing to check" >&2
    cat "$LOGS/nvidia-smi.log" 2>/dev/null >&2
    exit 1
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_mode --format=csv \
    >>"$LOGS/nvidia-smi.log" 2>&1
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1)
if nvidia-smi --query-gpu=compute_mode --format=csv,noheader | grep -qi exclusive; then
    echo "gpu-check: the GPU is in an exclusive compute mode; producer and consumers cannot share" \
        "it (nvidia-smi -c DEFAULT)" >&2
fi

# shellcheck source=deps.sh
source "$ROOT/scripts/deps.sh"
if [ "$INSTALL" = 1 ]; then
    step deps deps tsock_install_deps
    step python-deps python-deps tsock_install_python_deps
else
    record deps SKIPPED "" "--no-install"
fi

install_toolkit() {
    if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
        return 0
    fi
    local sudo=()
    [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && sudo=(sudo)
    if command -v apt-get >/dev/null 2>&1 &&
        "${sudo[@]}" apt-get install -y -q nvidia-cuda-toolkit </dev/null &&
        nvcc --version | grep -Eq 'release (1[2-9]|[2-9][0-9])\.'; then
        return 0
    fi
    # NVIDIA publishes the compiler and the runtime as wheels; point CMake at them.
    python3 -m pip install --user nvidia-cuda-nvcc-cu12 nvidia-cuda-runtime-cu12 ||
        python3 -m pip install --user --break-system-packages nvidia-cuda-nvcc-cu12 \
            nvidia-cuda-runtime-cu12 || return 1
    local base
    base=$(python3 -c 'import nvidia.cuda_nvcc, os; print(os.path.dirname(nvidia.cuda_nvcc.__path__[0]))')
    export PATH=$base/cuda_nvcc/bin:$PATH
    export CUDAToolkit_ROOT=$base/cuda_nvcc
    export CPATH=$base/cuda_runtime/include:${CPATH:-}
    export LIBRARY_PATH=$base/cuda_runtime/lib:${LIBRARY_PATH:-}
}
[ "$INSTALL" = 1 ] && [ "$PREBUILT" = 0 ] && step toolkit toolkit install_toolkit
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH

torch_cuda() { python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; }
install_torch_cuda() {
    torch_cuda && return 0
    # The CPU wheel the test command installs has no CUDA: get the default (CUDA) build.
    python3 -m pip install --user --upgrade --force-reinstall torch torchvision ||
        python3 -m pip install --user --break-system-packages --upgrade --force-reinstall \
            torch torchvision || return 1
    torch_cuda
}
if [ "$INSTALL" = 1 ]; then
    step torch-cuda torch-cuda install_torch_cuda
else
    step torch-cuda torch-cuda torch_cuda
fi

# ---- 2. build ---------------------------------------------------------------------------------
build() {
    cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTSOCK_WERROR=ON &&
        grep -q 'cuda=ON' <(cmake -S "$ROOT" -B "$BUILD" 2>&1) &&
        cmake --build "$BUILD" -j"$JOBS"
}
# A build made elsewhere: it must have been configured with the CUDA toolkit.
prebuilt() {
    grep -q cudart "$BUILD/libtsock/CMakeFiles/tsock.dir/link.txt" &&
        [ -x "$BUILD/tests/gpu/gpu_ring" ] && echo "using the build in $BUILD (cuda=ON)"
}
if [ "$PREBUILT" = 1 ]; then
    step build build prebuilt ||
        echo "gpu-check: $BUILD is not a build of tsock with the CUDA backend" >&2
elif ! step build build build; then
    echo "gpu-check: the build failed or has no real CUDA runtime (cuda=OFF): see $LOGS/build.log" >&2
fi

# The integration tests (gpusim.*, ...) run the Python interpreter found where the build was
# configured, its path written into the build's CTestTestfile.cmake files. A build made on
# another machine (--build) may name one that is not here (a pyenv shim): ctest would then
# say "Could not find executable" and run none of them. Those files are pointed at this
# machine's python3, said in the report.
retarget_python() {
    local cached here files
    cached=$(sed -n 's/^_\{0,1\}Python3_EXECUTABLE:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null | head -n 1)
    here=$(command -v python3)
    if [ -z "$cached" ] || [ -x "$cached" ]; then
        echo "the tests' interpreter ${cached:-(none cached)} is here"
        return 0
    fi
    [ -n "$here" ] || { echo "the build's tests run $cached, and no python3 is on PATH here"; return 1; }
    files=$(grep -rlF --include=CTestTestfile.cmake "\"$cached\"" "$BUILD")
    echo "the build's tests run $cached (where it was configured), missing here:" \
        "pointed at $here in $(echo "$files" | grep -c .) CTestTestfile.cmake files"
    echo "$files" | while read -r f; do
        [ -n "$f" ] && sed -i "s|\"$cached\"|\"$here\"|g" "$f"
    done
}
if [ "$PREBUILT" = 1 ]; then
    step "tests' python3" python-path retarget_python
    STEPS[${#STEPS[@]} - 1]+=": $(tail -n 1 "$LOGS/python-path.log")"
fi

# Every gpu.* test must run (the full check and --issue20).
gpu_tests() {
    # Every gpu.* test must run: a skip here means the GPU was not usable, which is a failure.
    local out=$LOGS/ctest-gpu.out rc
    ctest --test-dir "$BUILD" -L '^gpu$' --output-on-failure -j1 >"$out" 2>&1
    rc=$?
    cat "$out"
    [ "$rc" -eq 0 ] && ! grep -q 'Skipped\|Not Run' "$out"
}

# ---- issue 20: the GPU decoder ------------------------------------------------------------------
# nvJPEG for the library to load (exported here: a step runs in a subshell).
NVJPEG_FROM=
find_nvjpeg() {
    if [ -n "${TSOCK_NVJPEG_LIBRARY:-}" ]; then NVJPEG_FROM="TSOCK_NVJPEG_LIBRARY (given)"; return; fi
    local lib=
    if [ -n "$NVJPEG_WHEEL" ]; then
        mkdir -p "$OUT/nvjpeg" && python3 -m zipfile -e "$NVJPEG_WHEEL" "$OUT/nvjpeg" &&
            lib=$(find "$OUT/nvjpeg" -name 'libnvjpeg.so.1[23]' | head -n 1)
        [ -n "$lib" ] && NVJPEG_FROM="the wheel $NVJPEG_WHEEL"
    fi
    if [ -z "$lib" ]; then
        lib=$(python3 - <<'PY'
import glob, os, sys
for d in sys.path:
    for pat in ("nvidia/cu13/lib/libnvjpeg.so.13", "nvidia/nvjpeg/lib/libnvjpeg.so.1*",
                "nvidia/cu12/lib/libnvjpeg.so.12"):
        hits = glob.glob(os.path.join(d, pat))
        if hits:
            print(hits[0]); sys.exit()
PY
)
        [ -n "$lib" ] && NVJPEG_FROM="an installed nvidia-nvjpeg wheel"
    fi
    if [ -z "$lib" ]; then
        for f in /usr/local/cuda/lib64/libnvjpeg.so.13 /usr/local/cuda/lib64/libnvjpeg.so.12; do
            [ -e "$f" ] && { NVJPEG_FROM="the CUDA toolkit ($f)"; return; }
        done
        lib=$(python3 -c 'import glob, os, torchvision
print((glob.glob(os.path.join(os.path.dirname(os.path.dirname(torchvision.__file__)),
      "torchvision.libs", "libnvjpeg*.so*")) + [""])[0])' 2>/dev/null)
        [ -n "$lib" ] && NVJPEG_FROM="the copy torchvision bundles ($lib): no nvidia-nvjpeg wheel"
    fi
    if [ -n "$lib" ]; then export TSOCK_NVJPEG_LIBRARY=$lib; else NVJPEG_FROM="NOT FOUND"; fi
}
# The decoder's gpusim tests; a test ctest could not start (its interpreter missing) is said
# to be that, not a decoder failure.
gpusim_decoder_tests() {
    local out=$LOGS/gpusim-decoder.out rc
    ctest --test-dir "$BUILD" -R '^gpusim\.decoder_' --output-on-failure -j4 >"$out" 2>&1
    rc=$?
    cat "$out"
    if grep -q 'Could not find executable' "$out"; then
        echo "gpu-check: ctest could not START these tests (an executable they name is missing" \
            "here: see above): an environment problem of this machine, not a decoder failure"
        return 2
    fi
    [ "$rc" -eq 0 ] && ! grep -q 'Skipped\|Not Run' "$out"
}
issue20_steps() {
    find_nvjpeg
    record nvjpeg "$([ "$NVJPEG_FROM" = "NOT FOUND" ] && echo FAIL || echo PASS)" "" \
        "${TSOCK_NVJPEG_LIBRARY:-} from $NVJPEG_FROM"
    # Bounded, so that a hang cannot eat the machine's time (--step-timeout overrides).
    STEP_TIMEOUT=${STEP_TIMEOUT:-180} step ctest-gpu ctest-gpu gpu_tests
    STEP_TIMEOUT=${STEP_TIMEOUT:-120} step gpusim-decoder gpusim-decoder gpusim_decoder_tests
    local tree=$OUT/tree photos=()
    [ -n "$PHOTOS" ] && photos=(--photos "$PHOTOS")
    [ -z "$PHOTOS" ] && [ -d /usr/share/backgrounds/mate ] && photos=(--photos /usr/share/backgrounds/mate)
    [ ${#photos[@]} -eq 0 ] && echo "gpu-check: NO PHOTOGRAPHS (--photos DIR): the tree is SYNTHETIC" >&2
    step tree tree "$BUILD/producer/tsock-mkdataset" "$tree" --images 2000 --classes 10 --force \
        "${photos[@]}" --json
    # Without nvJPEG, --decoder gpu stops at start with one message saying what to install.
    missing_nvjpeg() {
        local err rc
        err=$(TSOCK_NVJPEG_LIBRARY=/nonexistent/libnvjpeg.so.13 "$BUILD/producer/tsock-producer" \
            --dataset imagenet --root "$tree" --device cuda --decoder gpu \
            --endpoint "ipc://$OUT/missing.sock" 2>&1)
        rc=$?
        echo "exit $rc: $err"
        [ "$rc" -ne 0 ] && echo "$err" | grep -q 'nvidia-nvjpeg' &&
            ! echo "$err" | grep -q 'indexed\|serving'
    }
    step "no nvJPEG: one message at start" nvjpeg-missing missing_nvjpeg
    step "pixels (train)" pixels-train sh -c "'$BUILD/benchmarks/tsock-bench-gpudecode' '$tree' --images 400 > '$OUT/pixels-train.json'"
    step "pixels (val)" pixels-val sh -c "'$BUILD/benchmarks/tsock-bench-gpudecode' '$tree' --images 400 --val > '$OUT/pixels-val.json'"
    local left=$((BUDGET - (SECONDS - START_S) - 20))
    if [ "$left" -lt 40 ]; then
        record "decode and collocation" SKIPPED "" "no time left of --budget $BUDGET s"
        return
    fi
    STEP_TIMEOUT=$((left + 60)) step "decode and collocation" gpu-decode python3 "$ROOT/benchmarks/collocation/gpu_decode.py" \
        --root "$tree" --bin-dir "$BUILD/producer" --library "$BUILD/libtsock/libtsock.so" \
        --deadline "$left" --out "$OUT/gpu_decode.json"
}

if [ "$ISSUE20" = 1 ]; then
    issue20_steps
else
# ---- 3. tests ---------------------------------------------------------------------------------
step ctest-gpu ctest-gpu gpu_tests
python_gpu_tests() {
    # The binding's CUDA tensors, with torch's own CUDA build; a skip here is a failure.
    local out=$LOGS/pytest-cuda.out rc
    TSOCK_LIBRARY=$BUILD/libtsock/libtsock.so TSOCK_BIN_DIR=$BUILD/producer \
        python3 -m pytest "$ROOT/tests/python/test_cuda.py" -v -rs -p no:cacheprovider >"$out" 2>&1
    rc=$?
    cat "$out"
    # test_no_device_errors skips where a GPU is usable (it provokes "no device"); the GPU
    # test itself must have run and passed.
    [ "$rc" -eq 0 ] && grep -q 'test_cuda_tensors_from_a_gpu_ring PASSED' "$out"
}
step pytest-cuda pytest-cuda python_gpu_tests
step ctest-gpusim ctest-gpusim ctest --test-dir "$BUILD" -L gpusim --output-on-failure -j2

# ---- 4. compute-sanitizer ---------------------------------------------------------------------
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck; do
    # --target-processes all: the consumers are child processes of gpu_ring.
    # Every CUDA call is many times slower under the sanitizer: the test's heartbeat timeout
    # and waits are scaled up so that no healthy peer is declared lost.
    step "compute-sanitizer $tool" "sanitizer-$tool" env TSOCK_TEST_TIME_SCALE=20 "$SAN" --tool "$tool" \
        --target-processes all --error-exitcode 9 "$BUILD/tests/gpu/gpu_ring" content
done

# ---- 5. benchmark -----------------------------------------------------------------------------
bench() { "$BUILD/benchmarks/tsock-bench-gpu" --batches 1000 >"$OUT/bench-gpu.json"; }
step tsock-bench-gpu bench-gpu bench

# ---- 6. collocation with --device cuda --------------------------------------------------------
COLLOC=(--ks 1,2,4 --epochs 2)
[ "$QUICK" = 1 ] && COLLOC=(--ks 1,2 --epochs 1 --images 400 --repeat 1)
# shellcheck disable=SC2206 # the caller's words, split as a command line's
[ -n "$COLLOC_ARGS" ] && COLLOC=($COLLOC_ARGS)
[ -n "$PHOTOS" ] && COLLOC+=(--photos "$PHOTOS")
[ "$INSTALL" = 0 ] && COLLOC+=(--no-install-photos)
colloc() {
    python3 "$ROOT/benchmarks/collocation/run.py" --device cuda --models resnet18,resnet50 \
        "${COLLOC[@]}" --configs shared_py,torchvision \
        --bin-dir "$BUILD/producer" --library "$BUILD/libtsock/libtsock.so" \
        --out-dir "$OUT/collocation" --no-plots
}
mkdir -p "$OUT/collocation"
step "collocation --device cuda" collocation colloc

fi

# ---- 7. report --------------------------------------------------------------------------------
python3 - "$OUT" "$GPU" "$DRIVER" "$(git -C "$ROOT" rev-parse HEAD 2>/dev/null)" "${STEPS[@]}" <<'PY'
import json, os, sys
out, gpu, driver, commit, *steps = sys.argv[1:]
rows = [dict(zip(("step", "status", "log", "detail"), s.split("|", 3))) for s in steps]
def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
report = {"gpu": gpu, "driver": driver, "commit": commit, "steps": rows,
          "bench_gpu": load(os.path.join(out, "bench-gpu.json")),
          "collocation": load(os.path.join(out, "collocation", "collocation_cuda.json")),
          "pixels_train": load(os.path.join(out, "pixels-train.json")),
          "pixels_val": load(os.path.join(out, "pixels-val.json")),
          "gpu_decode": load(os.path.join(out, "gpu_decode.json"))}
with open(os.path.join(out, "gpu-check-report.json"), "w") as f:
    json.dump(report, f, indent=2)
lines = [f"# tsock GPU check: {gpu} (driver {driver}), commit {commit}", "",
         "| Step | Result | Log |", "|------|--------|-----|"]
lines += [f"| {r['step']} | {r['status']} {r['detail']} | `{r['log']}` |" for r in rows]
if report["bench_gpu"]:
    lines += ["", "## tsock-bench-gpu", "", "```json", json.dumps(report["bench_gpu"], indent=2),
              "```"]
if report["collocation"]:
    lines += ["", "## Collocation (--device cuda)", "", "| Config | Model | K | images/s per job | "
              "CPU ms/image | data wait |", "|---|---|---|---|---|---|"]
    for r in report["collocation"].get("results", []):
        lines.append(f"| {r.get('config')} | {r.get('model')} | {r.get('k')} | "
                     f"{r.get('images_per_s_per_job', 0):.1f} | {r.get('cpu_ms_per_image', 0):.2f} | "
                     f"{r.get('data_wait', 0):.1%} |")
for name in ("pixels_train", "pixels_val"):
    px = report[name]
    if px:
        p = px["pixels"]
        lines += ["", f"## GPU decoder pixels against the CPU decoder ({px['preset']})", "",
                  f"{px['decoder']}: {px['compared']} images, mean abs diff "
                  f"{p['mean_abs_diff']:.3f}, PSNR {p['psnr_db']:.1f} dB (worst image "
                  f"{p['worst_image_psnr_db']:.1f} dB), max diff {p['max_abs_diff']}: "
                  f"{'PASS' if p['pass'] else 'FAIL'} ({p['bounds']}); CPU decoder "
                  f"{px['cpu_decoder']['images_per_s']:.0f} images/s on 1 thread "
                  f"({px['cpu_decoder']['cpu_ms_per_image']:.2f} CPU ms/image), GPU decoder "
                  f"{px['gpu_decoder']['images_per_s']:.0f} images/s "
                  f"({px['gpu_decoder']['cpu_ms_per_image']:.2f} CPU ms/image)"]
md = os.path.join(out, "gpu_decode.md")
if os.path.exists(md):
    with open(md) as f:
        lines += ["", f.read().replace("# Issue 20", "## Issue 20")]
with open(os.path.join(out, "gpu-check-report.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
failed = [r for r in rows if r["status"] == "FAIL"]
sys.exit(1 if failed else 0)
PY
rc=$?
echo "report: $OUT/gpu-check-report.json, $OUT/gpu-check-report.md"
exit $rc
