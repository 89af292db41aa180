#!/usr/bin/env python3
"""Installing with pip alone (issue 22): `pip install .` from the repository root, and the
manylinux wheel of scripts/wheel.sh, each into a fresh virtual environment.

    packaging_test.py {pip_install|wheel} --root REPO [--build-info normal/CMakeCache.txt]

Each run makes a temporary folder with a venv (--system-site-packages, for numpy, torch and the
build tools scripts/deps.sh installs), installs tsock into it with no TSOCK_LIBRARY,
TSOCK_BIN_DIR or PYTHONPATH in the environment, and then:
  - the venv's programs are on its PATH and say the version of include/tsock/version.h, as do
    tsock.__version__ and the package metadata;
  - tsock loads the libtsock.so.0 of the venv, and build_info() reports the CUDA backend as
    CMake found it (TSOCK_HAVE_CUDA of the normal build's cache, when given);
  - pip_install: the venv's tsock-producer serves, and tsock.DataLoader reads two exact epochs;
  - wheel: ensure_producer, with the venv's bin folder off PATH, starts the producer installed in
    the package, and the loader reads two exact epochs; the libraries the wheel bundles
    (libzmq, liburing, libjpeg, libturbojpeg, libpng) resolve from inside it, for the programs
    (ldd) and in the Python process (/proc/self/maps); no CUDA or nvJPEG library is bundled.
Nothing is left behind: the folder, the venv and every process go at the end. The build goes
through the persistent folder build/pip-<tag>/ (pyproject.toml), with ccache, so a second run
rebuilds only what changed. Standard library only.
"""
import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

from itest import Failure, Skip, check

SAMPLES = 200
BATCH = 16
PROGRAMS = ["tsock-producer", "tsock-consume", "tsock-stat", "tsock-keygen", "tsock-mkdataset"]
# What libtsock (so the producer and the Python process) loads from the wheel; tsock-mkdataset
# adds libturbojpeg.
BUNDLED = ["libzmq", "liburing", "libjpeg", "libpng16"]
NEVER_BUNDLED = ["libcuda", "libcudart", "libnvjpeg", "libnvidia"]


def clean_env(extra=None):
    """The environment of a user who never heard of TSOCK_LIBRARY, with ccache for the build."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TSOCK_LIBRARY", "TSOCK_BIN_DIR", "TSOCK_PRODUCER", "PYTHONPATH",
                        "VIRTUAL_ENV")}
    ccache = shutil.which("ccache")
    if ccache:
        env.setdefault("CMAKE_C_COMPILER_LAUNCHER", ccache)
        env.setdefault("CMAKE_CUDA_COMPILER_LAUNCHER", ccache)
    env.update(extra or {})
    return env


def run(argv, what, env=None, timeout=900, cwd=None):
    r = subprocess.run(argv, capture_output=True, text=True, env=env or clean_env(),
                       timeout=timeout, cwd=cwd, stdin=subprocess.DEVNULL)
    check(r.returncode == 0, f"{what}: exit code {r.returncode}\n--- stdout\n{r.stdout[-4000:]}"
          f"\n--- stderr\n{r.stderr[-4000:]}")
    return r.stdout


def header_version(root):
    with open(os.path.join(root, "include", "tsock", "version.h")) as f:
        return re.search(r'#define TSOCK_VERSION_STRING "([^"]+)"', f.read()).group(1)


def cmake_has_cuda(cache):
    if not cache or not os.path.exists(cache):
        return None
    with open(cache) as f:
        m = re.search(r"^TSOCK_HAVE_CUDA:\w+=(\w+)", f.read(), re.M)
    return None if m is None else m.group(1).upper() in ("ON", "1", "TRUE")


def make_venv(tmp):
    venv = os.path.join(tmp, "venv")
    run([sys.executable, "-m", "venv", "--system-site-packages", venv], "python -m venv")
    return venv


# Runs in the venv's interpreter: checks where tsock comes from, optionally starts the producer
# with ensure_producer, reads two epochs, and prints one JSON line.
READER = r"""
import importlib.metadata, json, os, sys
import tsock
args = json.loads(sys.argv[1])
out = {"version": tsock.__version__, "metadata_version": importlib.metadata.version("tsock"),
       "library": os.path.realpath(tsock.library_path), "build_info": tsock.build_info(),
       "prefix": os.path.realpath(sys.prefix)}
handle = None
if args["ensure"]:
    import tsock.launch
    out["found_program"] = os.path.realpath(tsock.launch._find_program(None))
    handle = tsock.ensure_producer("synthetic", endpoint=args["endpoint"], samples=args["samples"],
                                   batch_size=args["batch"], epochs=2, image_size=16)
    out["started"] = handle.started
epochs = []
with tsock.DataLoader(args["endpoint"], return_ids=True, timeout=60) as loader:
    for epoch in range(2):
        ids = []
        for item in loader:
            t = item[-1]
            ids += [int(v) for v in (t.numpy() if hasattr(t, "numpy") else t).tolist()]
        epochs.append(sorted(ids))
out["exact"] = [e == list(range(args["samples"])) for e in epochs]
out["counts"] = [len(e) for e in epochs]
with open("/proc/self/maps") as f:
    out["maps"] = sorted({line.split()[-1] for line in f if ".so" in line})
if handle is not None:
    out["producer_exit"] = handle.stop(60)
print(json.dumps(out))
"""


def read_two_epochs(venv, tmp, ensure, env=None):
    endpoint = f"ipc://{tmp}/producer.sock"
    args = {"endpoint": endpoint, "samples": SAMPLES, "batch": BATCH, "ensure": ensure}
    out = run([os.path.join(venv, "bin", "python"), "-c", READER, json.dumps(args)],
              "the venv's python reading two epochs", env=env, timeout=300, cwd=tmp)
    return json.loads(out.strip().splitlines()[-1]), endpoint


def check_common(res, venv, version, want_cuda):
    prefix = os.path.realpath(venv)
    check(res["version"] == version and res["metadata_version"] == version,
          f"versions {res['version']!r} / {res['metadata_version']!r}, header {version!r}")
    check(res["library"].startswith(prefix + os.sep) and
          res["library"].endswith(os.path.join("tsock", "libtsock.so.0")),
          f"tsock loaded {res['library']}, not the venv's package copy")
    info = res["build_info"]
    check(info["version"] == version, f"build_info version {info}")
    if want_cuda is not None:
        check(info["cuda"] == want_cuda, f"build_info cuda {info['cuda']}, CMake found "
              f"CUDA: {want_cuda}")
    check(res["exact"] == [True, True], f"epochs not exact: {res['counts']} samples")


def check_programs(venv, version):
    for name in PROGRAMS:
        path = os.path.join(venv, "bin", name)
        check(os.access(path, os.X_OK), f"{name} is not on the venv's PATH ({path})")
    out = run([os.path.join(venv, "bin", "tsock-producer"), "--version"], "--version")
    check(out.startswith(f"tsock-producer {version} (libtsock {version}"), f"--version: {out!r}")


def serve_and_read(venv, tmp, version, want_cuda):
    """The venv's tsock-producer serves; the venv's tsock reads two exact epochs."""
    endpoint = f"ipc://{tmp}/producer.sock"
    prod = subprocess.Popen(
        [os.path.join(venv, "bin", "tsock-producer"), "--dataset", "synthetic", "--samples",
         str(SAMPLES), "--batch-size", str(BATCH), "--image-size", "16", "--epochs", "2",
         "--wait-consumers", "1", "--endpoint", endpoint], env=clean_env(),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        res, _ = read_two_epochs(venv, tmp, ensure=False)
        rc = prod.wait(60)
        log = prod.stdout.read()
        check(rc == 0, f"the venv's tsock-producer: exit code {rc}: {log[-2000:]}")
    finally:
        if prod.poll() is None:
            prod.kill()
            prod.wait()
    check_common(res, venv, version, want_cuda)


def test_pip_install(args, tmp):
    version = header_version(args.root)
    venv = make_venv(tmp)
    run([os.path.join(venv, "bin", "python"), "-m", "pip", "install", "--no-build-isolation",
         "--no-cache-dir", args.root], "pip install . (scikit-build-core)")
    check_programs(venv, version)
    serve_and_read(venv, tmp, version, cmake_has_cuda(args.build_info))
    # The legacy package folder says the same version (it is read by nothing else).
    with open(os.path.join(args.root, "bindings", "python", "pyproject.toml")) as f:
        legacy = re.search(r'^version = "([^"]+)"', f.read(), re.M).group(1)
    check(legacy == version, f"bindings/python/pyproject.toml says {legacy}, version.h {version}")


def bundled_ok(path_list, site, what, libs=BUNDLED):
    for lib in libs:
        hits = [p for p in path_list if os.path.basename(p).startswith(lib + "-") or
                os.path.basename(p).startswith(lib + ".")]
        check(hits, f"{what}: {lib} not loaded at all: {path_list}")
        for p in hits:
            check(os.path.realpath(p).startswith(os.path.join(site, "tsock.libs") + os.sep),
                  f"{what}: {lib} resolves to {p}, outside the wheel's tsock.libs")


def test_wheel(args, tmp):
    version = header_version(args.root)
    dist = os.path.join(tmp, "dist")
    out = run(["bash", os.path.join(args.root, "scripts", "wheel.sh"), dist], "scripts/wheel.sh")
    wheel = out.strip().splitlines()[-1]
    name = os.path.basename(wheel)
    check(re.match(rf"tsock-{re.escape(version)}-py3-none-manylinux_\d+_\d+_x86_64\.whl$", name),
          f"wheel name {name}: not a py3-none manylinux wheel of version {version}")
    members = subprocess.run([sys.executable, "-m", "zipfile", "-l", wheel], capture_output=True,
                             text=True, check=True).stdout
    for lib in NEVER_BUNDLED:
        check(f"tsock.libs/{lib}" not in members, f"the wheel bundles {lib}: {members}")
    venv = make_venv(tmp)
    run([os.path.join(venv, "bin", "python"), "-m", "pip", "install", "--no-cache-dir",
         "--no-deps", wheel], "pip install the repaired wheel")
    check_programs(venv, version)
    site = os.path.realpath(glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))[0])
    # The programs: every bundled library from the wheel, libtsock.so.0 from the package.
    ldd = run(["ldd", os.path.join(site, "tsock", "bin", "tsock-producer")], "ldd")
    resolved = dict(re.findall(r"^\s*(\S+) => (\S+)", ldd, re.M))
    check(os.path.realpath(resolved.get("libtsock.so.0", "")) ==
          os.path.join(site, "tsock", "libtsock.so.0"), f"tsock-producer's libtsock: {ldd}")
    check("not found" not in ldd, f"ldd tsock-producer: {ldd}")
    bundled_ok(list(resolved.values()), site, "ldd tsock-producer")
    mk = run(["ldd", os.path.join(site, "tsock", "bin", "tsock-mkdataset")], "ldd mkdataset")
    check("not found" not in mk, f"ldd tsock-mkdataset: {mk}")
    bundled_ok(re.findall(r"=> (\S+)", mk), site, "ldd tsock-mkdataset",
               ["libturbojpeg", "libpng16"])
    # ensure_producer must find the package's producer with the venv's bin off PATH.
    env = clean_env({"PATH": os.pathsep.join(p for p in os.environ.get("PATH", "").split(
        os.pathsep) if os.path.realpath(p) != os.path.realpath(os.path.join(venv, "bin")))})
    res, _ = read_two_epochs(venv, tmp, ensure=True, env=env)
    check(res.get("started") is True, f"ensure_producer did not start a producer: {res}")
    check(res["found_program"] == os.path.join(site, "tsock", "bin", "tsock-producer"),
          f"ensure_producer found {res['found_program']}")
    check(res.get("producer_exit") == 0, f"producer exit {res.get('producer_exit')}")
    check_common(res, venv, version, cmake_has_cuda(args.build_info))
    bundled_ok(res["maps"], site, "the Python process (/proc/self/maps)")


def end_leftovers(tmp):
    """Kills, by pid, a process of this test that outlived a failure: a producer started by
    ensure_producer in its own session, recognised by this run's unique folder in its argv."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace")
        except OSError:
            continue
        if tmp in argv and int(entry) != os.getpid():
            try:
                os.kill(int(entry), signal.SIGKILL)
            except OSError:
                pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("test", choices=["pip_install", "wheel"])
    ap.add_argument("--root", required=True)
    ap.add_argument("--build-info", help="a CMakeCache.txt whose TSOCK_HAVE_CUDA to expect")
    args = ap.parse_args()
    for mod in ("scikit_build_core",) + (("auditwheel",) if args.test == "wheel" else ()):
        try:
            __import__(mod)
        except ImportError:
            print(f"SKIP: {mod} is not installed (scripts/deps.sh installs it)")
            return 77
    tmp = tempfile.mkdtemp(prefix=f"tsock-packaging-{args.test}-")
    try:
        {"pip_install": test_pip_install, "wheel": test_wheel}[args.test](args, tmp)
        print(f"PASS packaging {args.test}")
        return 0
    except (Failure, subprocess.TimeoutExpired) as e:
        print(f"FAIL packaging {args.test}: {e}")
        return 1
    except Skip as e:
        print(f"SKIP: {e}")
        return 77
    finally:
        end_leftovers(tmp)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
