"""`goodput --help`, `--version` and `python -m cli`: every command listed, the exit codes and `--debug` documented,
and DuckDB not imported to say so."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

import pytest

from conftest import invoke


@pytest.mark.slow
def test_help_lists_every_command_without_importing_duckdb():
    code = (
        "import sys, cli; sys.argv = ['goodput', '--help']\n"
        "try:\n"
        "    cli.main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('duckdb' in sys.modules, 'pyarrow' in sys.modules, 'ray' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    for command in ("report", "check", "spans", "query", "ingest"):
        assert command in out
    assert out.strip().splitlines()[-1] == "False False False"


@pytest.mark.slow
def test_python_dash_m_cli_is_the_same_command():
    result = subprocess.run(
        [sys.executable, "-m", "cli", "report", "--help"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and "--precedence" in result.stdout


def test_the_help_documents_the_exit_codes_and_debug():
    result = invoke(["--help"], width=200)
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    assert "3 an internal error in goodput itself" in text
    assert "--debug" in text and "GOODPUT_DEBUG=1" in text and "--version" in text


def test_version_is_the_installed_one():
    result = invoke(["--version"], width=80)
    assert result.exit_code == 0
    assert result.stdout == f"goodput {version('goodput')}\n"
