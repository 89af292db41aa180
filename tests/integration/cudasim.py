"""What the integration tests on the simulated CUDA device share (TSOCK_CUDA_SIM=1): a device
of the test's own, its shared-memory objects (devapi_sim_mem.c names them
/dev/shm/tsock-sim-<device>-...), and removing what a failed test's killed processes left."""
import os


def use_sim_device(tag):
    """Makes this process and its children use a simulated device named after `tag` and pid."""
    os.environ["TSOCK_CUDA_SIM"] = "1"
    os.environ["TSOCK_CUDA_SIM_DEVICE"] = f"{tag}{os.getpid()}"


def sim_objects():
    """The names under /dev/shm of the simulated device's objects alive now."""
    prefix = "tsock-sim-" + os.environ["TSOCK_CUDA_SIM_DEVICE"] + "-"
    return [n for n in os.listdir("/dev/shm") if n.startswith(prefix)]


class SimCleanup:
    """Mixed in before an Env: its cleanup also removes the simulated device's objects."""

    def cleanup(self):
        super().cleanup()
        for name in sim_objects():
            try:
                os.unlink(os.path.join("/dev/shm", name))
            except OSError:
                pass
