#!/usr/bin/env python3
"""Stamps a benchmark's JSON that a Rust benchmark wrote (target/bench/NAME.json)
with its provenance, as benches/common.py's write_json does for the Python
ones: the commit, the date, the command, the machine.

    benches/stamp.py target/bench/sim_scale.json "benches/sim_scale.sh ARGS"

A list becomes {"provenance": ..., "results": list}; an object gets the key.
"""

import json
import sys

from common import provenance


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: benches/stamp.py FILE.json COMMAND")
    path, command = sys.argv[1], sys.argv[2]
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"stamp.py: cannot read {path}: {e}")
    if not isinstance(data, dict):
        data = {"results": data}
    data = {"provenance": provenance(command), **data}
    with open(path, "w") as f:
        json.dump(data, f, indent=2)


if __name__ == "__main__":
    main()
