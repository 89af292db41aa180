"""The launcher examples of examples/distributed/ are well-formed: the torchrun script compiles
and answers --help, the Slurm script passes `bash -n`, the Kubernetes pod spec parses and
shares what tsock needs between its containers, and every tsock-producer / tsock-stat flag the
examples use exists. (train_ddp.py itself runs for real under torchrun in test_groups.py.)"""
import os
import py_compile
import re
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(REPO, "examples", "distributed")
TRAIN_DDP = os.path.join(EXAMPLES, "train_ddp.py")
SLURM = os.path.join(EXAMPLES, "slurm_train.sbatch")
POD = os.path.join(EXAMPLES, "k8s-pod.yaml")


def help_flags(program):
    out = subprocess.run([program, "--help"], capture_output=True, text=True)
    return set(re.findall(r"--[a-z][a-z0-9-]*", out.stdout + out.stderr))


def test_train_ddp_compiles_and_answers_help(tsock, tmp_path):
    py_compile.compile(TRAIN_DDP, cfile=str(tmp_path / "train_ddp.pyc"), doraise=True)
    out = subprocess.run([sys.executable, TRAIN_DDP, "--help"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    for flag in ("--endpoint", "--group", "--start-producer", "--ids-out", "--drop-last"):
        assert flag in out.stdout


def test_slurm_script_syntax(programs):
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is not installed")
    out = subprocess.run([bash, "-n", SLURM], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    text = open(SLURM).read()
    assert text.startswith("#!/bin/bash\n") and "#SBATCH --nodes=" in text
    # The flags given to the programs exist (the producer's command is inside a quoted
    # `bash -c` string, so look at the words after each program name up to the quote's end).
    joined = text.replace("\\\n", " ")
    for program in ("tsock-producer", "tsock-stat"):
        known = help_flags(os.path.join(os.environ["TSOCK_BIN_DIR"], program))
        uses = re.findall(program + r" ([^'\n;&]*)", joined)
        assert uses, f"the Slurm script does not run {program}"
        for use in uses:
            for flag in re.findall(r"--[a-z][a-z0-9-]*", use):
                assert flag in known, f"{program} has no flag {flag}"
    train_flags = set(re.findall(r"--[a-z][a-z0-9-]*",
                                 joined[joined.rindex("train_ddp.py"):]))
    help_text = subprocess.run([sys.executable, TRAIN_DDP, "--help"], capture_output=True,
                               text=True, timeout=120).stdout
    for flag in train_flags:
        assert flag in help_text, f"train_ddp.py has no flag {flag}"


def test_kubernetes_pod_spec(programs):
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed: the pod spec cannot "
                                              "be parsed here")
    with open(POD) as f:
        pod = yaml.safe_load(f)
    assert pod["apiVersion"] == "v1" and pod["kind"] == "Pod"
    spec = pod["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    producers = [c for c in spec.get("initContainers", []) if c["name"] == "producer"]
    assert len(producers) == 1, "the producer runs as a sidecar (init container)"
    producer = producers[0]
    assert producer.get("restartPolicy") == "Always", "a native sidecar keeps running"
    trainer = [c for c in spec["containers"] if c["name"] == "trainer"][0]

    def mounts(container):
        return {m["mountPath"]: m["name"] for m in container["volumeMounts"]}

    pm, tm = mounts(producer), mounts(trainer)
    # /dev/shm: one memory-backed emptyDir mounted in both (the ring's slots).
    assert pm["/dev/shm"] == tm["/dev/shm"]
    assert volumes[pm["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
    # The ipc socket lies in a volume both mount at the same path.
    endpoint = producer["args"][producer["args"].index("--endpoint") + 1]
    assert endpoint.startswith("ipc://")
    socket_dir = os.path.dirname(endpoint[len("ipc://"):])
    assert pm[socket_dir] == tm[socket_dir] and "emptyDir" in volumes[pm[socket_dir]]
    assert trainer["args"][trainer["args"].index("--endpoint") + 1] == endpoint
    # Socket and shared memory are mode 0600: both containers run as one user.
    user = spec.get("securityContext", {}).get("runAsUser")
    assert user is not None and all(
        c.get("securityContext", {}).get("runAsUser", user) == user for c in (producer, trainer))
    # The flags exist.
    known = help_flags(programs["tsock-producer"])
    for flag in (a for a in producer["args"] if a.startswith("--")):
        assert flag in known, f"tsock-producer has no flag {flag}"
    probe = producer["startupProbe"]["exec"]["command"]
    assert probe[0] == "tsock-stat" and probe[1] == endpoint
    stat_flags = help_flags(os.path.join(os.environ["TSOCK_BIN_DIR"], "tsock-stat"))
    for flag in (a for a in probe if a.startswith("--")):
        assert flag in stat_flags, f"tsock-stat has no flag {flag}"
    assert trainer["command"] == ["torchrun"] and any(
        a.endswith("examples/distributed/train_ddp.py") for a in trainer["args"])
