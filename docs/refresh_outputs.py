"""Rewrite the output shown in docs/*.md's ```console blocks with what the commands print now.

    python docs/refresh_outputs.py            # every page
    python docs/refresh_outputs.py cli.md     # the pages named

For after a change that moves every figure at once (the sample traces regenerated: other pids, other ids, other
timings). Each block is run as tests/test_docs.py runs it (same widths, same scratch folder holding sample_traces/,
examples/ and docs/), and what follows each command is replaced by what it printed; a `...` line first or last keeps
only that many of the last or first lines, as the test reads it. Review the diff: the prose around the blocks still
names figures.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "src"), str(REPO)]

import test_docs  # noqa: E402 - the tests' own runner, so the page shows what the test will compare


class _Patch:
    """What `test_docs.run_goodput` asks of pytest's monkeypatch: a setattr that lasts for the run."""

    def setattr(self, target: object, name: str, value: object) -> None:
        setattr(target, name, value)


def refreshed(block: test_docs.Console) -> str:
    out: list[str] = []
    code = 0
    for command, shown in test_docs.steps(block.text):
        printed, code = test_docs.run_step(command, block.columns, code, _Patch())
        lines = printed.rstrip("\n").split("\n") if printed.strip("\n") else []
        if shown and shown[-1] == "...":
            lines = [*lines[: len(shown) - 1], "..."]
        elif shown and shown[0] == "...":
            lines = ["...", *lines[len(lines) - len(shown) + 1 :]]
        out += [f"$ {command}", *lines]
    return "\n".join(out) + "\n"


def main() -> None:
    names = set(sys.argv[1:])
    with tempfile.TemporaryDirectory() as scratch:
        for shipped in test_docs.SHIPPED:
            (Path(scratch) / shipped).symlink_to(REPO / shipped)
        os.chdir(scratch)
        for page in test_docs.PAGES:
            if names and page.name not in names:
                continue
            text = page.read_text(encoding="utf-8")
            blocks = [b for b in test_docs.console_blocks() if b.page == page.name]
            for block in blocks:
                text = text.replace(block.text, refreshed(block), 1)
            if text != page.read_text(encoding="utf-8"):
                page.write_text(text, encoding="utf-8")
                print(f"rewrote {page.relative_to(REPO)}")


if __name__ == "__main__":
    main()
