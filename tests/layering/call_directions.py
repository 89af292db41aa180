#!/usr/bin/env python3
"""No two files of an engine call each other in both directions (docs/architecture.md).

    call_directions.py DIR [DIR...]

For each directory, the internal functions (`tsock__name`) defined at the start of a line in
its .c files are attributed to their file; every call `tsock__name(` in another file of the
same directory is an edge between the two files. Any cycle of such edges fails, named file by
file. Calls through the backend table or the channel's handlers (function pointers) are not
calls by name and are not seen, which is the point: those are the interfaces that go upward.
Standard library only."""
import os
import re
import sys

DEF = re.compile(r"^(tsock__[a-z0-9_]+)\(", re.M)
CALL = re.compile(r"\b(tsock__[a-z0-9_]+)\(")


def edges_of(directory):
    files = sorted(f for f in os.listdir(directory) if f.endswith(".c"))
    text = {f: open(os.path.join(directory, f), encoding="utf-8").read() for f in files}
    owner = {}
    for f in files:
        for name in DEF.findall(text[f]):
            owner[name] = f
    edges = {f: set() for f in files}
    for f in files:
        for name in CALL.findall(text[f]):
            g = owner.get(name)
            if g and g != f:
                edges[f].add(g)
    return edges


def cycle(edges):
    """A list of files forming a cycle, or None (depth-first search, colours)."""
    colour = {f: 0 for f in edges}
    stack = []

    def visit(f):
        colour[f] = 1
        stack.append(f)
        for g in sorted(edges[f]):
            if colour[g] == 1:
                return stack[stack.index(g):] + [g]
            if colour[g] == 0:
                found = visit(g)
                if found:
                    return found
        stack.pop()
        colour[f] = 2
        return None

    for f in sorted(edges):
        if colour[f] == 0:
            found = visit(f)
            if found:
                return found
    return None


def main():
    failed = 0
    for directory in sys.argv[1:]:
        found = cycle(edges_of(directory))
        if found:
            print(f"FAIL: {directory}: files call each other in a circle: {' -> '.join(found)}")
            failed = 1
        else:
            print(f"{directory}: every call between files goes one way")
    return failed


if __name__ == "__main__":
    sys.exit(main())
