#!/usr/bin/env python3
"""Runs a benchmark program and keeps its JSON with what makes a figure checkable: the commit
measured, the date, the machine and its load average before and after the run, the command.

    python3 benchmarks/record.py --out docs/benchmarks/NAME.json -- PROGRAM [ARGS...]

The program's standard output must end with one JSON object (on one line, or indented over
several, as the benchmark scripts print it). Its standard error passes through. The exit status
is the program's. Standard library only.
"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402


def parse_output(text):
    """The JSON object the program printed last, on one line or over several."""
    start = text.find("{")
    if start >= 0:
        try:
            return json.loads(text[start:])
        except ValueError:
            pass
    return benchlib.last_json(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="where the JSON goes")
    ap.add_argument("--note", help="a sentence kept with the record (what was run, and why)")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("no command given")
    record = {"commit": benchlib.git_commit(),
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": benchlib.machine(), "command": cmd}
    started = time.monotonic()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    record["wall_s"] = round(time.monotonic() - started, 1)
    record["load_avg_at_end"] = os.getloadavg()
    record["exit_status"] = r.returncode
    if args.note:
        record["note"] = args.note
    try:
        record["result"] = parse_output(r.stdout)
    except (RuntimeError, ValueError) as e:
        print(f"record.py: no JSON from {' '.join(cmd)}: {e}", file=sys.stderr)
        return r.returncode or 1
    with open(args.out, "w") as f:
        f.write(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record["result"]))
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
