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

tsock_install_python_deps()
{
    if python3 -c 'import numpy, pytest, torch, torchvision, PIL
assert int(PIL.__version__.split(".")[0]) >= 13' >/dev/null 2>&1; then
        echo "deps: python packages present (${TSOCK_PIP_PACKAGES[*]})"
        return 0
    fi
    echo "deps: pip installing ${TSOCK_PIP_PACKAGES[*]}"
    python3 -m pip install -q "${TSOCK_PIP_PACKAGES[@]}" ||
        python3 -m pip install -q --break-system-packages "${TSOCK_PIP_PACKAGES[@]}"
}

# Run directly (not sourced): install now.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    tsock_install_deps
    tsock_install_python_deps
fi
