"""A job whose trace cannot be written (SPEC section 2): a full disk is said once, with its cause and no traceback; the
spans lost are counted and said at shutdown; the job runs on as if telemetry were off and exits 0.

Each job is a real process of 3,000 steps writing to a real full filesystem: `/dev/full` (every write fails with
ENOSPC, the error a full disk gives), and a small tmpfs that fills up part-way, mounted in a mount namespace of the
job's own (`unshare`), so nothing outlives the test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import read_framed_spans, read_json_lines_spans

pytestmark = pytest.mark.slow

STEPS = 3_000

JOB = textwrap.dedent(
    """
    import sys
    import instrument
    from instrument import RLSpanGroup, iteration_scope, managed_span, umbrella_span

    path, exporter = sys.argv[1:3]
    instrument.configure(service_name="job", span_groups="per_step", exporter=exporter, path=path)
    total = 0
    with umbrella_span(RLSpanGroup.U_JOB, "rl.toy.job"):
        for step in range(int(sys.argv[3])):
            with iteration_scope(step), umbrella_span(RLSpanGroup.U_STEP, "rl.toy.step"):
                with managed_span(RLSpanGroup.GENERATION, "rl.toy.generation"):
                    total += step
    instrument.force_flush()  # the job span too, which no step's end writes
    lost = instrument.dropped_spans()
    instrument.shutdown()
    print(total, lost)  # the job's own result, and what it was told it lost
    """
)
SPANS = 1 + 2 * STEPS  # the job span, and a step and a generation span a step


def job_command(path: Path | str, exporter: str) -> list[str]:
    return [sys.executable, "-c", JOB, str(path), exporter, str(STEPS)]


def job_environment() -> dict[str, str]:
    """This environment without any GOODPUT_* choice, so the job's own arguments decide."""
    return {key: value for key, value in os.environ.items() if not key.startswith("GOODPUT_")}


def assert_ran_on_and_said_it_once(job: subprocess.CompletedProcess, where: str) -> int:
    """The job's output is whole, exit 0; its stderr is exactly the one warning and the count at shutdown. Returns
    the count of spans lost."""
    assert job.returncode == 0, job.stderr
    total, told_lost = map(int, job.stdout.split())
    assert total == sum(range(STEPS))
    said = job.stderr.splitlines()
    assert len(said) == 2, job.stderr  # not a line per batch, not a traceback
    warning, count = said
    assert warning.startswith("goodput: could not write ") and where in warning, warning
    assert "No space left on device" in warning, warning
    assert count.startswith("goodput: ") and " of this process were not written to " in count, count
    assert "No space left on device" in count, count
    lost = int(count.removeprefix("goodput: ").split()[0])
    assert told_lost == lost  # `dropped_spans()` counts them too
    return lost


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux), whose writes fail with ENOSPC")
@pytest.mark.parametrize("exporter", ["otlp-file", "json-file"])
def test_a_job_writing_to_a_full_device_says_so_once_and_runs_on(tmp_path, exporter):
    full = tmp_path / ("trace.otlp" if exporter == "otlp-file" else "trace.jsonl")
    full.symlink_to("/dev/full")  # opens like any file; every write fails as on a full disk
    job = subprocess.run(
        job_command(full, exporter), env=job_environment(), capture_output=True, text=True, timeout=300
    )
    assert assert_ran_on_and_said_it_once(job, str(full)) == SPANS  # nothing was written


def namespace_with_a_tmpfs() -> list[str]:
    """The command prefix that runs a shell in a mount namespace of its own: as root, or as a user mapped to root in
    a user namespace of its own, where the kernel allows those. Skips the test when neither can mount a tmpfs."""
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux's unshare to mount a small tmpfs in a namespace of the test's own")
    prefix = ["unshare", "--mount"] if os.geteuid() == 0 else ["unshare", "--user", "--map-root-user", "--mount"]
    probe = subprocess.run(
        [*prefix, "sh", "-c", 'mount -t tmpfs -o size=64k tmpfs "$1"', "sh", "/tmp"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({' '.join(prefix)}): {probe.stderr.strip()}")
    return prefix


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mounts a tmpfs: Linux only")
@pytest.mark.parametrize(
    ("exporter", "read_spans"), [("otlp-file", read_framed_spans), ("json-file", read_json_lines_spans)]
)
def test_a_job_that_fills_its_filesystem_says_so_once_and_keeps_every_record_whole(tmp_path, exporter, read_spans):
    prefix = namespace_with_a_tmpfs()
    mount_point, kept = tmp_path / "small", tmp_path / "kept"
    mount_point.mkdir()
    # 64 KiB: a few hundred steps fit, the rest find the filesystem full. The trace is copied out before the
    # namespace, and its mount, end.
    script = 'mount -t tmpfs -o size=64k tmpfs "$1" || exit 97; m=$1 k=$2; shift 2; "$@"; s=$?; cp -r "$m/run" "$k"'
    script += "; exit $s"
    job = subprocess.run(
        [*prefix, "sh", "-c", script, "sh", str(mount_point), str(kept), *job_command(mount_point / "run", exporter)],
        env=job_environment(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if job.returncode == 97:
        pytest.skip(f"cannot mount a tmpfs here: {job.stderr.strip()}")
    lost = assert_ran_on_and_said_it_once(job, str(mount_point / "run"))
    (trace,) = kept.iterdir()
    written = read_spans(trace)  # every record whole: a batch that did not fit was cut off again
    assert 0 < lost < SPANS and len(written) + lost == SPANS
