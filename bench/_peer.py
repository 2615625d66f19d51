"""Runs ONE benchmark peer in this fresh process: ``python bench/_peer.py MODULE:FUNC JSON``.

Started by :func:`_common.call_peer` with the explicit environment of
:func:`_common.peer_env`. Imports ``MODULE`` from ``bench/``, calls
``FUNC(**json.loads(JSON))`` (a dict, JSON-able) and prints it as one JSON line with
``peer`` = :func:`_common.peer_info` (thread counts as this process's libraries report
them after the call, CPU, load).
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    from _common import peer_info

    mod, func = sys.argv[1].split(":")
    kwargs = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    out = getattr(importlib.import_module(mod), func)(**kwargs)
    out["peer"] = peer_info()
    print(json.dumps(out, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
