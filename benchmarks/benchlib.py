"""What the benchmark scripts share: the machine's description and the commit measured."""
import os
import platform
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def machine():
    """Cores, CPU model, kernel, Python and the load average when the run started."""
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu_model": model, "kernel": platform.release(),
            "python": platform.python_version(), "load_avg_at_start": os.getloadavg()}


def git_commit():
    """The checkout's commit, with "-dirty" when libtsock/, producer/ or include/ differ."""
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "libtsock",
                                "producer", "include"], capture_output=True, text=True,
                               timeout=10).stdout.strip()
        return head + ("-dirty" if dirty else "") if head else None
    except (OSError, subprocess.SubprocessError):
        return None
