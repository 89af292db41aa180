"""Makes `import torch` fail in every Python process whose PYTHONPATH starts here, as if torch
were not installed. test_numpy_only.py uses it to run the binding's tests without torch."""
import sys


class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked for the numpy-only "
                                      f"tests)", name=name)
        return None


sys.meta_path.insert(0, _NoTorch())
