"""The tsock programs of an installed package (``pip install .``), and their PATH launchers.

The programs are ELF executables inside the package, in ``tsock/bin/``, next to the
``libtsock.so.0`` they load (their RUNPATH is ``$ORIGIN/..``). ``pip install`` puts one launcher
per program on the environment's PATH (``[project.scripts]`` in the root pyproject.toml); each
replaces itself with the program (``os.execv``), so the process a caller starts, signals and
waits for is the program itself.
"""
import os
import sys

#: The folder of the packaged programs (it exists only in an installed package).
BIN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin")


def packaged(name):
    """The path of packaged program `name`, or None when this package holds no such program
    (a source checkout used through TSOCK_LIBRARY)."""
    path = os.path.join(BIN_DIR, name)
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


def _exec(name):
    path = packaged(name)
    if path is None:
        sys.stderr.write(f"{name}: this tsock package has no {name} program in {BIN_DIR}: "
                         f"reinstall it with `pip install .` from the tsock repository, or "
                         f"use the one of a CMake build\n")
        sys.exit(127)
    os.execv(path, [name] + sys.argv[1:])


def tsock_producer():
    _exec("tsock-producer")


def tsock_consume():
    _exec("tsock-consume")


def tsock_stat():
    _exec("tsock-stat")


def tsock_keygen():
    _exec("tsock-keygen")


def tsock_mkdataset():
    _exec("tsock-mkdataset")
