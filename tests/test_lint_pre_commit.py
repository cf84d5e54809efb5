"""The repository's pre-commit hook (`.pre-commit-hooks.yaml`) as a user adds it: the three lines docs/lint.md shows,
in a project of their own, run by pre-commit itself (which installs goodput from this repository into an
environment of its own, as it would from a URL)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PRE_COMMIT = Path(sys.executable).with_name("pre-commit")


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def the_three_lines(repo: str, rev: str) -> str:
    """docs/lint.md's lines, pointed at `repo` at `rev`."""
    page = (REPO / "docs" / "lint.md").read_text(encoding="utf-8")
    block = page.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert len(block.strip().splitlines()) == 3, block
    block = re.sub(r"repo: \S+", f"repo: {repo}", block)
    return re.sub(r"rev: \S+", f"rev: {rev}", block)


@pytest.mark.slow
def test_pre_commit_runs_the_hook_on_a_users_commit_and_stops_it_on_an_error(tmp_path):
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("the hook is installed from this repository's git history: no git checkout here")
    rev = git("rev-parse", "HEAD", cwd=REPO)
    if git("ls-tree", "--name-only", rev, ".pre-commit-hooks.yaml", cwd=REPO) != ".pre-commit-hooks.yaml":
        pytest.skip("HEAD has no .pre-commit-hooks.yaml yet (commit it to test the hook)")
    project = tmp_path / "project"
    project.mkdir()
    git("init", "-q", ".", cwd=project)
    (project / ".pre-commit-config.yaml").write_text("repos:\n" + the_three_lines(str(REPO), rev))
    (project / "job.py").write_text("from instrument import umbrella_span\n\nwith umbrella_span('reward', 'r'):\n"
                                    "    pass\n")  # fmt: skip
    (project / "notes.txt").write_text("not Python: not linted\n")
    git("add", ".", cwd=project)
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"), "GIT_CONFIG_NOSYSTEM": "1"}
    env.pop("VIRTUAL_ENV", None)

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(PRE_COMMIT), "run", "--all-files", "--color", "never"], cwd=project, env=env,
                              capture_output=True, text=True, timeout=900)  # fmt: skip

    failed = run()
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "goodput lint" in failed.stdout and "Failed" in failed.stdout
    assert "job.py:3:6: leaf-at-umbrella umbrella_span() is given the leaf group 'reward'" in failed.stdout
    assert "Found 1 error and 0 warnings in 1 file." in failed.stdout
    (project / "job.py").write_text("from instrument import managed_span\n\nwith managed_span('reward', 'r'):\n"
                                    "    pass\n")  # fmt: skip
    passed = run()
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert re.search(r"goodput lint\.+Passed", passed.stdout), passed.stdout
