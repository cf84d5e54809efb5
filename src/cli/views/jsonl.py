"""The report as JSON Lines (SPEC section 11): one object a line, so a training dashboard can log it step by step.

The lines, in order, each with a `kind` first and otherwise the keys of the JSON report (SPEC sections 6-8):
- `{"kind": "iteration", ...}`: each row of `iterations`, sorted by iteration (with `--by process`, one per
  iteration and process);
- the whole-run objects `total`, `outside`, `rework`, `downtime`, `job`, each as `{"kind": "<key>", ...}`;
- `{"kind": "attempt", ...}` for each attempt, `{"kind": "process", ...}` for each process's totals (`--by process`);
- then any other whole-run object the report carries, the same way (an object as its key; a list's items under
  the key without its plural `s`).
A reader that logs by step takes the iteration lines as steps and the rest as the run's summary.
"""

from __future__ import annotations

import json
from typing import Any

WHOLE_RUN_KINDS = ("total", "outside", "rework", "downtime", "job")
LIST_KINDS = {"attempts": "attempt", "processes": "process"}


def report_jsonl(payload: dict[str, Any]) -> str:
    """The JSON report object as JSON Lines, in the order above."""
    lines = [{"kind": "iteration", **row} for row in payload["iterations"]]
    rest = [key for key in payload if key != "iterations"]
    ordered = [k for k in WHOLE_RUN_KINDS if k in payload] + [k for k in LIST_KINDS if k in payload]
    for key in ordered + [k for k in rest if k not in ordered]:
        value = payload[key]
        if isinstance(value, dict):
            lines.append({"kind": key, **value})
        elif isinstance(value, list):
            kind = LIST_KINDS.get(key, key[:-1] if key.endswith("s") else key)
            lines += [
                {"kind": kind, **item} if isinstance(item, dict) else {"kind": kind, "value": item} for item in value
            ]
        else:
            lines.append({"kind": key, "value": value})
    return "".join(json.dumps(line) + "\n" for line in lines)
