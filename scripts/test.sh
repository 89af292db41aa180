#!/usr/bin/env bash
# The test command: installs what is missing, builds and runs every test.
#
#   bash scripts/test.sh
#
# Steps, each in its own build directory under build/ (kept between runs, so a second run is
# incremental); every tsock build is made with -DTSOCK_WERROR=ON (warnings are errors here, not
# in users' builds):
#   1. dependencies (apt-get, only what is missing)
#   2. checks        formatting (clang-format --dry-run -Werror), the public headers alone as
#                    C++17 (g++ -Wall -Wextra -Werror)
#   3. build/normal  RelWithDebInfo, all tests (unit, build layering, integration, fuzz corpus
#                    replay), then the exported symbols of libtsock.so (exactly tsock_*)
#   4. python        pytest on the binding (real torch, and a numpy-only run); a run that
#                    collects or runs no test fails
#   5. build/asan    AddressSanitizer + UndefinedBehaviorSanitizer, all tests
#   6. build/release-gcc, build/release-clang
#                    Release (-O3, what users build) with each compiler: builds warning-free;
#                    the GCC one also runs the unit tests
#   7. build/fuzz    the libFuzzer targets (clang), a short session each with a fixed seed
#   8. build/tsan    ThreadSanitizer, the unit and integration tests (ring, proto, transport,
#                    producer/consumer processes); skipped when TSOCK_TEST_QUICK=1
#   9. packaging     install build/normal into a scratch prefix, build examples/c_train_loop
#                    against it with find_package(tsock) (shared and static), check pkg-config,
#                    and run the installed producer with the example consumer
#  10. /dev/shm      holds what it held when the run started: whatever is new is named and fails
#                    the run (tests leave nothing behind; issue 20)
#  11. TMPDIR        every test (ctest, pytest, the packaging run) runs with TMPDIR set to an
#                    empty folder of this run's scratch ($SCRATCH/tmp); whatever is left there
#                    at the end is named and fails the run (pytest's own tmp_path folders go to
#                    $SCRATCH/pytest, torch's inductor cache to $SCRATCH/torchinductor)
# The summary names each step with its seconds and its counts, and ends with the line
#   tests: N passed, N failed, N skipped
# where a skipped test (ctest: exit 77 or a SKIP: line; pytest: skipped) is never a pass.
#
# Environment: TSOCK_TEST_QUICK=1 skips the TSan build (local iteration only; CI never sets it).
# TSOCK_TEST_SHM_CHECK=0 skips step 10 (and says so): only for a machine where other users'
# programs make /dev/shm objects during the run.
# TSOCK_TEST_TMP_CHECK=0 skips step 11 (and says so): the tests then run with the caller's TMPDIR
# (default /tmp), and nothing they leave there is looked for.
# TSOCK_JOBS (default 2) sets build and ctest parallelism. TSOCK_TSAN_LABELS overrides the ctest
# label regex of the TSan step.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
JOBS=${TSOCK_JOBS:-2}
QUICK=${TSOCK_TEST_QUICK:-0}
BUILD=$ROOT/build
TSAN_LABELS=${TSOCK_TSAN_LABELS:-unit|integration|gpusim}
START=$SECONDS

CURRENT=start
STEP_TIMES=() # "seconds  section", one per finished section
STEP_START=$SECONDS
# section TITLE: closes the running section (its time goes into the summary), starts TITLE.
section() {
    end_section
    CURRENT=$*
    STEP_START=$SECONDS
    printf '\n========== %s ==========\n' "$*"
}
end_section() {
    if [ "$CURRENT" != start ] && [ "$CURRENT" != summary ]; then
        STEP_TIMES+=("$(printf '%5d s  %s' $((SECONDS - STEP_START)) "$CURRENT")")
    fi
}

# Sanitizer behaviour: stop at the first report, with a stack. Caller's settings win.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:halt_on_error=1:detect_leaks=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

# Scratch space for sockets and the packaging test; /tmp keeps ipc paths short.
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/tsock-test.XXXXXX")
# What /dev/shm holds before the run: a passing run leaves it so (step 10).
# The tests' TMPDIR (step 11): a folder of the scratch, which a passing run leaves empty. It is
# short: the tests make ipc sockets under it, and sun_path holds 107 bytes (the longest test
# socket path is about 70 bytes longer than TMPDIR; with TMPDIR unset this one is 26 bytes).
TMP_CHECK=${TSOCK_TEST_TMP_CHECK:-1}
if [ "$TMP_CHECK" = 0 ]; then
    TEST_TMP=${TMPDIR:-/tmp}
else
    TEST_TMP=$SCRATCH/tmp
    mkdir "$TEST_TMP"
fi
if [ ${#TEST_TMP} -gt 36 ]; then
    echo "the tests' TMPDIR $TEST_TMP is too long for their ipc socket paths (sun_path holds" \
        "107 bytes): run with TMPDIR set to a short folder, such as /tmp" >&2
    rm -rf "$SCRATCH"
    exit 1
fi
# The environment of every test: see step 11.
TEST_ENV=(env "TMPDIR=$TEST_TMP" "TORCHINDUCTOR_CACHE_DIR=$SCRATCH/torchinductor")
SHM_BEFORE=$(find /dev/shm -mindepth 1 -maxdepth 1 -printf '%f\n' 2>/dev/null | sort)

SUMMARY=()   # one line per step (and per ctest run)
PASSED=0
FAILED=0
SKIPPED=0
FAILED_STEPS=()
BG_PIDS=()

# On any exit: stop what we started, remove scratch files, print the summary. A step that
# aborted the script (a build error, a packaging check) is named there.
on_exit() {
    local rc=$? pid line
    for pid in "${BG_PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    rm -rf "$SCRATCH"
    if [ "$rc" -ne 0 ] && [ "$CURRENT" != summary ]; then
        FAILED_STEPS+=("aborted in '$CURRENT' (exit $rc)")
    fi
    end_section
    CURRENT=summary
    printf '\n========== %s ==========\n' summary
    for line in "${SUMMARY[@]}"; do
        echo "$line"
    done
    echo "time per step:"
    for line in "${STEP_TIMES[@]}"; do
        echo "$line"
    done
    echo "time: $((SECONDS - START)) s"
    if [ ${#FAILED_STEPS[@]} -gt 0 ]; then
        local IFS=';'
        echo "FAILED: ${FAILED_STEPS[*]}"
        rc=1
    fi
    echo "tests: $PASSED passed, $FAILED failed, $SKIPPED skipped"
    exit "$rc"
}
trap on_exit EXIT

# configure_build NAME CMAKE_ARGS...: configures and builds build/NAME (RelWithDebInfo unless
# the arguments say otherwise; warnings are errors); a build failure stops.
configure_build() {
    local name=$1
    shift
    cmake -S "$ROOT" -B "$BUILD/$name" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTSOCK_WERROR=ON "$@" &&
        cmake --build "$BUILD/$name" -j"$JOBS"
}

# run_ctest NAME [WRAPPER...] -- CTEST_ARGS...: runs ctest in build/NAME, records its summary and
# carries on when tests fail, so one run reports every failing step.
run_ctest() {
    local name=$1
    shift
    local wrapper=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        wrapper+=("$1")
        shift
    done
    [ $# -gt 0 ] && shift
    local log=$BUILD/$name/ctest.log
    local rc=0
    "${TEST_ENV[@]}" "${wrapper[@]}" ctest --test-dir "$BUILD/$name" --output-on-failure \
        -j"$JOBS" --no-tests=error "$@" 2>&1 | tee "$log" || rc=$?
    local line total failed skipped reasons
    line=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n 1 || true)
    if [ -n "$line" ]; then
        total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line")
        failed=$(sed -E 's/.*passed, ([0-9]+) tests? failed.*/\1/' <<<"$line")
        # ctest's own line counts skipped tests (exit 77, SKIP_REGULAR_EXPRESSION: the GPU tests
        # without a GPU) as passed; they are listed under "did not run" as "(Skipped)".
        skipped=$(grep -cE '^[[:space:]]*[0-9]+ - .*\(Skipped\)$' "$log" || true)
        skipped=${skipped:-0}
        PASSED=$((PASSED + total - failed - skipped))
        FAILED=$((FAILED + failed))
        SKIPPED=$((SKIPPED + skipped))
        SUMMARY+=("$(printf '%-13s ctest: %d passed, %d failed, %d skipped (of %d)' "$name" \
            $((total - failed - skipped)) "$failed" "$skipped" "$total")")
        if [ "$skipped" -gt 0 ]; then
            # Name them, and say why as the tests printed it.
            local names
            names=$(grep -E '^[[:space:]]*[0-9]+ - .*\(Skipped\)$' "$log" |
                sed -E 's/^[[:space:]]*[0-9]+ - (.*) \(Skipped\)$/\1/' | paste -sd ' ' -)
            reasons=$(grep -h '^SKIP:' "$BUILD/$name/Testing/Temporary/LastTest.log" 2>/dev/null |
                sort -u | head -n 3 | paste -sd ' ' - || true)
            SUMMARY+=("$(printf '%-13s skipped: %s (%s)' "" "$names" "${reasons:-see ctest.log}")")
        fi
    else
        SUMMARY+=("$(printf '%-13s ctest exited %d without a summary' "$name" "$rc")")
    fi
    if [ "$rc" -ne 0 ]; then
        FAILED_STEPS+=("ctest $name")
        if [ -z "$line" ]; then FAILED=$((FAILED + 1)); fi
        failure_lines "$BUILD/$name/Testing/Temporary/LastTest.log"
    fi
}

# failure_lines LOG: adds to the summary the last lines each failed test printed, so the end of
# a long log (all that CI keeps of a run) says why, not only which.
failure_lines() {
    local test_line
    while IFS= read -r test_line; do
        SUMMARY+=("$(printf '%-13s %s' "" "$test_line")")
    done < <(awk '
        / Test: / { name = $NF; n = 0; next }
        /^Output:$/ { inside = 1; next }
        /^<end of output>$/ { inside = 0; next }
        inside && !/^-+$/ { out[++n] = $0 }
        /^Test Failed\.$|^Test Timeout|^Test Exception/ {
            print name " failed; its last lines:"
            for (i = (n > 12 ? n - 11 : 1); i <= n; i++) print "  " out[i]
        }' "$1" 2>/dev/null)
}

# check_step NAME DESCRIPTION COMMAND...: runs a check (not a test count), records OK or FAILED
# in the summary and carries on.
check_step() {
    local name=$1 what=$2
    shift 2
    if "$@"; then
        SUMMARY+=("$(printf '%-13s %s: OK' "$name" "$what")")
    else
        SUMMARY+=("$(printf '%-13s %s: FAILED' "$name" "$what")")
        FAILED_STEPS+=("$name")
    fi
}

# Formatting: every C source and header of the project as .clang-format says.
check_format() {
    local files
    mapfile -d '' files < <(find libtsock include producer tests benchmarks examples -type f \
        \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) -print0 | sort -z)
    echo "clang-format $(clang-format --version | grep -oE '[0-9]+\.[0-9.]+' | head -n 1): ${#files[@]} files"
    clang-format --dry-run -Werror "${files[@]}"
}

# The public headers compile as C++ (a C++ program includes them), each on its own.
check_headers_cxx() {
    local h ok=0
    for h in include/tsock/*.h; do
        if g++ -x c++ -std=c++17 -fsyntax-only -Wall -Wextra -Werror -Iinclude "$h"; then
            echo "C++17: $h OK"
        else
            echo "C++17: $h FAILED"
            ok=1
        fi
    done
    return $ok
}

# libtsock.so exports exactly the tsock_* symbols (tsock.map, -fvisibility=hidden). A version
# script with a named node adds that node as an absolute (A) symbol: not ours, ignored.
check_exports() {
    local so=$1 syms bad n
    syms=$(nm -D --defined-only "$so" | awk 'NF >= 3 && $2 != "A" { sub(/@.*/, "", $3); print $3 }')
    n=$(grep -cE '^tsock_' <<<"$syms" || true)
    bad=$(grep -vE '^tsock_' <<<"$syms" || true)
    echo "$(basename "$so"): ${n:-0} tsock_* symbols exported"
    if [ -n "$bad" ]; then
        echo "exported but not tsock_*: $(tr '\n' ' ' <<<"$bad")"
        return 1
    fi
    [ "${n:-0}" -gt 0 ] || { echo "no tsock_* symbol exported"; return 1; }
}

section "dependencies"
# shellcheck source=scripts/deps.sh
source "$ROOT/scripts/deps.sh"
tsock_install_deps
tsock_install_python_deps
tsock_install_cuda_toolkit
tsock_install_nvjpeg

section "checks: formatting, public headers as C++"
check_step format "clang-format --dry-run -Werror (libtsock include producer tests benchmarks examples)" \
    check_format
check_step headers "include/tsock/*.h alone as C++17 (g++ -Wall -Wextra -Werror)" check_headers_cxx

section "normal build (RelWithDebInfo): all tests"
configure_build normal -DTSOCK_SANITIZE=
# Said in the summary either way: a build without the CUDA runtime tests only the simulated
# device, and the gpu.* tests then skip for that reason too.
if grep -q cudart "$BUILD/normal/libtsock/CMakeFiles/tsock.dir/link.txt"; then
    SUMMARY+=("$(printf '%-13s built with the CUDA runtime (%s)' cuda \
        "$(grep -m1 '^CMAKE_CUDA_COMPILER:' "$BUILD/normal/CMakeCache.txt" | cut -d= -f2)")")
else
    SUMMARY+=("$(printf '%-13s WARNING: built WITHOUT the CUDA runtime (no toolkit found or usable; see the CMake warning): only the simulated device is tested' cuda)")
fi
run_ctest normal --
check_step exports "build/normal libtsock.so exports only tsock_*" \
    check_exports "$BUILD/normal/libtsock/libtsock.so"

section "Python binding: pytest with real torch, and a numpy-only run (normal build)"
pyrc=0
TSOCK_LIBRARY="$BUILD/normal/libtsock/libtsock.so" TSOCK_BIN_DIR="$BUILD/normal/producer" \
    "${TEST_ENV[@]}" python3 -m pytest "$ROOT/tests/python" -q -p no:cacheprovider \
    --basetemp="$SCRATCH/pytest" 2>&1 | tee "$BUILD/normal/pytest.log" ||
    pyrc=$?
# The last summary line: "3 passed, 1 skipped in 2.1s", "no tests ran in 0.01s", with or
# without ===== around it.
pyline=$(grep -E '(no tests ran|[0-9]+ (passed|failed|skipped|errors?|xfailed|xpassed|deselected|warnings?)).* in [0-9.]+s' \
    "$BUILD/normal/pytest.log" | tail -n 1 | sed -E 's/^=+ //; s/ =+$//' || true)
pycount() { # pycount WORD...: the sum of "<n> WORD" in the summary line
    local w n sum=0
    for w in "$@"; do
        for n in $(grep -oE "(^|[ ,])[0-9]+ $w(,| |$)" <<<"$pyline" | grep -oE '[0-9]+' || true); do
            sum=$((sum + n))
        done
    done
    echo "$sum"
}
pypassed=$(pycount passed xpassed)
pyfailed=$(pycount failed error errors)
pyskipped=$(pycount skipped xfailed)
PASSED=$((PASSED + pypassed))
FAILED=$((FAILED + pyfailed))
SKIPPED=$((SKIPPED + pyskipped))
SUMMARY+=("$(printf '%-13s pytest: %d passed, %d failed, %d skipped (%s)' python "$pypassed" \
    "$pyfailed" "$pyskipped" "${pyline:-pytest printed no summary}")")
# A run that collected or ran nothing (exit 5, "no tests ran", everything skipped or
# deselected) tested nothing: a failure, never a pass.
if [ "$pyrc" -ne 0 ] || [ $((pypassed + pyfailed)) -eq 0 ]; then
    if [ "$pyrc" -eq 5 ] || [ $((pypassed + pyfailed)) -eq 0 ]; then
        FAILED_STEPS+=("pytest ran no test (exit $pyrc)")
    else
        FAILED_STEPS+=("pytest")
    fi
    [ "$pyfailed" -gt 0 ] || FAILED=$((FAILED + 1))
fi

section "ASan + UBSan build: all tests"
configure_build asan -DTSOCK_SANITIZE=address,undefined
run_ctest asan --

section "Release builds (what users build): GCC and clang, warnings as errors; GCC's unit tests"
# Users build Release (-O3), where GCC and clang warn about more than at -O2; TSOCK_WERROR is
# off for them, on here, so that a new warning shows up in this run rather than in theirs.
configure_build release-gcc -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=gcc -DTSOCK_SANITIZE=
SUMMARY+=("$(printf '%-13s Release build (gcc, -DTSOCK_WERROR=ON): OK' release-gcc)")
run_ctest release-gcc -- -L unit
check_step exports "build/release-gcc libtsock.so exports only tsock_*" \
    check_exports "$BUILD/release-gcc/libtsock/libtsock.so"
if command -v clang >/dev/null 2>&1; then
    configure_build release-clang -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang \
        -DTSOCK_SANITIZE=
    SUMMARY+=("$(printf '%-13s Release build (clang, -DTSOCK_WERROR=ON): OK' release-clang)")
    check_step exports "build/release-clang libtsock.so exports only tsock_*" \
        check_exports "$BUILD/release-clang/libtsock/libtsock.so"
else
    echo "no clang: the clang Release build is not checked" >&2
    FAILED_STEPS+=("release-clang: no clang")
fi

section "fuzz smoke: the libFuzzer targets (clang), fixed seed, from the committed corpora"
# The corpus replays already run in ctest; this checks that every libFuzzer target still
# builds and survives a short deterministic session. New inputs go to scratch, never into the
# corpus.
# fuzz_smoke TARGET CORPUS RUNS SECONDS
fuzz_smoke() {
    local target=$1 corpus=$2 runs=$3 secs=$4 log="$BUILD/fuzz/$1.log"
    mkdir -p "$SCRATCH/$target"
    if cmake --build "$BUILD/fuzz" -j"$JOBS" --target "$target" >"$log" 2>&1 &&
        "$BUILD/fuzz/tests/fuzz/$target" -seed=1 -runs="$runs" -max_total_time="$secs" \
            -rss_limit_mb=4096 "$SCRATCH/$target" "$ROOT/tests/fuzz/corpus/$corpus" >>"$log" 2>&1; then
        SUMMARY+=("$(printf '%-13s %s: %s' fuzz "$target" "$(grep -E '^Done [0-9]+ runs' "$log" |
            tail -n 1)")")
    else
        tail -n 40 "$log"
        SUMMARY+=("$(printf '%-13s %s FAILED (build/fuzz/%s.log)' fuzz "$target" "$target")")
        FAILED_STEPS+=("fuzz smoke $target")
    fi
    grep -E '^Done [0-9]+ runs' "$log" || true
}
if command -v clang >/dev/null 2>&1; then
    cmake -S "$ROOT" -B "$BUILD/fuzz" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
        -DTSOCK_SANITIZE= -DTSOCK_BUILD_FUZZERS=ON -DTSOCK_WERROR=ON
    fuzz_smoke fuzz_proto proto 500000 60
    fuzz_smoke fuzz_index index 200000 30
    fuzz_smoke fuzz_image image 60000 45
    fuzz_smoke fuzz_state state 300000 30
    fuzz_smoke fuzz_endpoint endpoint 200000 20
    fuzz_smoke fuzz_tar tar 300000 30
    fuzz_smoke fuzz_restarts image 300000 30
else
    echo "no clang: fuzz smoke skipped"
fi

if [ "$QUICK" = "1" ]; then
    section "TSan build: skipped (TSOCK_TEST_QUICK=1)"
    SUMMARY+=("$(printf '%-13s skipped (TSOCK_TEST_QUICK=1)' tsan)")
else
    section "TSan build: tests labelled '$TSAN_LABELS'"
    configure_build tsan -DTSOCK_SANITIZE=thread
    # TSan's runtime cannot place its shadow memory when the kernel randomises mmap with more
    # than 28 bits ("unexpected memory mapping"); run it without ASLR there.
    tsan_wrap=()
    if [ "$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 28)" -gt 28 ] &&
        setarch "$(uname -m)" -R true 2>/dev/null; then
        tsan_wrap=(setarch "$(uname -m)" -R)
        echo "vm.mmap_rnd_bits > 28: running TSan tests with ASLR off"
    fi
    # libzmq is not built with TSan; tests/tsan.supp says why its frames are suppressed.
    TSAN_OPTIONS="$TSAN_OPTIONS:suppressions=$ROOT/tests/tsan.supp" \
        run_ctest tsan "${tsan_wrap[@]}" -- -L "$TSAN_LABELS"
fi

section "packaging: install, find_package(tsock), pkg-config"
PREFIX=$BUILD/pkgtest/prefix
rm -rf "$BUILD/pkgtest"
cmake --install "$BUILD/normal" --prefix "$PREFIX"
PCFILE=$(find "$PREFIX" -name tsock.pc -print -quit)
CONFIG=$(find "$PREFIX" -name tsockConfig.cmake -print -quit)
[ -n "$PCFILE" ] || { echo "tsock.pc was not installed" >&2; exit 1; }
[ -n "$CONFIG" ] || { echo "tsockConfig.cmake was not installed" >&2; exit 1; }
LIBDIR=$(dirname "$(dirname "$PCFILE")")
echo "installed: $(cd "$PREFIX" && find . -type f | sort | tr '\n' ' ')"

for variant in shared static; do
    static=OFF
    [ "$variant" = static ] && static=ON
    cmake -S "$ROOT/examples/c_train_loop" -B "$BUILD/pkgtest/example-$variant" \
        -DCMAKE_PREFIX_PATH="$PREFIX" -DTRAIN_LOOP_STATIC=$static
    cmake --build "$BUILD/pkgtest/example-$variant" -j"$JOBS"
done

export PKG_CONFIG_PATH="$LIBDIR/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
echo "pkg-config --modversion tsock: $(pkg-config --modversion tsock)"
echo "pkg-config --cflags --libs tsock: $(pkg-config --cflags --libs tsock)"
cat >"$BUILD/pkgtest/pc_check.c" <<'EOF'
#include <stdio.h>
#include <string.h>
#include <tsock/tsock.h>
int main(void)
{
    /* The library links and runs, and agrees with its header on the version. */
    printf("tsock %s: %s\n", tsock_version_string(), tsock_strerror(TSOCK_E_END));
    if (tsock_version() != TSOCK_VERSION_NUMBER)
        return 1;
    return strcmp(tsock_version_string(), TSOCK_VERSION_STRING) != 0;
}
EOF
# shellcheck disable=SC2046  # pkg-config output is meant to be split into words
cc -std=c11 -Wall -Werror "$BUILD/pkgtest/pc_check.c" -o "$BUILD/pkgtest/pc_check" \
    $(pkg-config --cflags --libs tsock)
LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$BUILD/pkgtest/pc_check"
# Static linking pulls libzmq in through Requires.private.
pkg-config --static --libs tsock | grep -q -- '-lzmq' ||
    { echo "pkg-config --static --libs tsock does not name libzmq" >&2; exit 1; }

# The installed producer feeding the example training loop: the package works end to end.
if [ -x "$PREFIX/bin/tsock-producer" ]; then
    ep="ipc://$SCRATCH/pkgtest.sock"
    "${TEST_ENV[@]}" timeout 120 "$PREFIX/bin/tsock-producer" --dataset synthetic --endpoint "$ep" \
        --wait-consumers 1 --epochs 2 --samples 200 --batch-size 16 --image-size 16 &
    producer=$!
    BG_PIDS+=("$producer")
    "${TEST_ENV[@]}" timeout 120 "$BUILD/pkgtest/example-shared/train_loop" "$ep" 2 |
        tee "$BUILD/pkgtest/train_loop.log"
    wait "$producer"
    grep -q '^epoch 1: .* 200 samples' "$BUILD/pkgtest/train_loop.log" ||
        { echo "train_loop did not report 2 full epochs" >&2; exit 1; }
    echo "installed tsock-producer + example train_loop: OK"
else
    echo "no installed tsock-producer: end-to-end run of the example skipped" >&2
    FAILED_STEPS+=("packaging: tsock-producer not installed")
fi
SUMMARY+=("$(printf '%-13s install + find_package (shared, static) + pkg-config: OK' package)")

section "/dev/shm left as found"
if [ "${TSOCK_TEST_SHM_CHECK:-1}" = 0 ]; then
    echo "TSOCK_TEST_SHM_CHECK=0: /dev/shm is not compared with its state before the run"
    SUMMARY+=("$(printf '%-13s not checked (TSOCK_TEST_SHM_CHECK=0)' shm)")
else
    mapfile -t SHM_LEFT < <(comm -13 <(printf '%s\n' "$SHM_BEFORE") \
        <(find /dev/shm -mindepth 1 -maxdepth 1 -printf '%f\n' 2>/dev/null | sort) | sed '/^$/d')
    if [ ${#SHM_LEFT[@]} -gt 0 ]; then
        echo "the run left these in /dev/shm (a test did not remove what it made):" >&2
        printf '  %s\n' "${SHM_LEFT[@]}" >&2
        FAILED_STEPS+=("/dev/shm: left behind: ${SHM_LEFT[*]}")
        SUMMARY+=("$(printf '%-13s %d object(s) left behind' shm "${#SHM_LEFT[@]}")")
    else
        SUMMARY+=("$(printf '%-13s holds what it held before the run: OK' shm)")
    fi
fi

section "the tests' TMPDIR left empty"
if [ "$TMP_CHECK" = 0 ]; then
    echo "TSOCK_TEST_TMP_CHECK=0: the tests ran with TMPDIR=$TEST_TMP, not looked at"
    SUMMARY+=("$(printf '%-13s not checked (TSOCK_TEST_TMP_CHECK=0)' tmp)")
else
    mapfile -t TMP_LEFT < <(find "$TEST_TMP" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort)
    if [ ${#TMP_LEFT[@]} -gt 0 ]; then
        echo "the run left these in the tests' TMPDIR (a test did not remove what it made):" >&2
        for line in "${TMP_LEFT[@]}"; do # with what is inside, a few levels deep
            echo "  $line" >&2
            find "$TEST_TMP/$line" -mindepth 1 -maxdepth 2 -printf '    %P\n' | head -n 5 >&2
        done
        FAILED_STEPS+=("TMPDIR: left behind: ${TMP_LEFT[*]}")
        SUMMARY+=("$(printf '%-13s %d left behind in the TMPDIR of the tests' tmp "${#TMP_LEFT[@]}")")
    else
        SUMMARY+=("$(printf '%-13s the TMPDIR of the tests is left empty: OK' tmp)")
    fi
fi

end_section
CURRENT=summary
