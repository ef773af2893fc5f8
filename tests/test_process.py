"""The process runner: one error line that names a log, the whole output in that log (no TensorFlow)."""

import sys
from pathlib import Path

import pytest

from tfaot_dist import process
from tfaot_dist.errors import CompileFailed, ToolchainError

PY = sys.executable


def log_of(message: str) -> Path:
    assert message.endswith(")") and "(log: " in message, message
    return Path(message.rsplit("(log: ", 1)[1][:-1])


def test_success_returns_stdout(tmp_path: Path) -> None:
    out = process.run(
        [PY, "-c", "import os; print(os.getcwd()); print('é')"],
        what="print",
        cwd=tmp_path,
        log_dir=tmp_path / "logs",
    )
    assert out == f"{tmp_path}\né\n"
    assert not (tmp_path / "logs").exists()  # no log for a success


def test_failure_is_one_line_naming_the_log_which_holds_everything(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "for i in range(50): print(f'out {i}')\n"
        "for i in range(40): print(f'noise {i}', file=sys.stderr)\n"
        "print('x.cc:3:5: error: first real problem', file=sys.stderr)\n"
        "print('x.cc:9:1: error: second', file=sys.stderr)\n"
        "sys.exit(3)\n"
    )
    with pytest.raises(ToolchainError) as info:
        process.run([PY, "-c", script], what="compile x.cc", error=ToolchainError, log_dir=tmp_path / "logs")
    message = str(info.value)
    assert "\n" not in message and len(message) < 500, message
    assert message.startswith("compile x.cc failed (exit 3): x.cc:3:5: error: first real problem (log: "), (
        message
    )
    log = log_of(message)
    assert log.parent == tmp_path / "logs" and log.name.startswith("compile-x.cc-")
    text = log.read_text()
    assert f"command: {PY} -c " in text and "status: exit 3" in text
    assert all(f"out {i}\n" in text for i in range(50)) and all(f"noise {i}\n" in text for i in range(40))
    assert "x.cc:9:1: error: second" in text
    assert [p.name for p in log.parent.iterdir()] == [log.name]  # no temporary left beside it


def test_without_an_error_line_the_last_line_says_why(tmp_path: Path) -> None:
    with pytest.raises(CompileFailed) as info:
        process.run([PY, "-c", "raise ValueError('bad value')"], what="step", log_dir=tmp_path)
    assert str(info.value).startswith("step failed (exit 1): ValueError: bad value (log: "), info.value
    assert "Traceback" in log_of(str(info.value)).read_text()


def test_two_failures_get_two_logs(tmp_path: Path) -> None:
    logs = set()
    for _ in range(2):
        with pytest.raises(CompileFailed) as info:
            process.run([PY, "-c", "import sys; sys.exit(1)"], what="same step", log_dir=tmp_path)
        assert str(info.value).startswith("same step failed (exit 1) (log: "), info.value
        logs.add(log_of(str(info.value)))
    assert len(logs) == 2 and all(p.is_file() for p in logs)


def test_a_missing_program_is_one_line_and_no_log(tmp_path: Path) -> None:
    with pytest.raises(CompileFailed) as info:
        process.run(
            [tmp_path / "no-such-compiler", "--version"], what="compiler version", log_dir=tmp_path / "logs"
        )
    assert str(info.value) == (
        f"compiler version: cannot run {tmp_path / 'no-such-compiler'}: No such file or directory"
    )
    assert not (tmp_path / "logs").exists()


def test_a_timeout_is_a_failure_with_what_was_written(tmp_path: Path) -> None:
    script = "import sys, time; print('started', flush=True); time.sleep(30)"
    with pytest.raises(CompileFailed) as info:
        process.run([PY, "-c", script], what="slow step", timeout=1, log_dir=tmp_path)
    assert str(info.value).startswith("slow step failed (timed out after 1 s): started (log: "), info.value
    assert "started" in log_of(str(info.value)).read_text()


def test_a_signal_is_named(tmp_path: Path) -> None:
    with pytest.raises(CompileFailed, match=r"^harness failed \(killed by SIGSEGV\)"):
        process.run(
            [PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"],
            what="harness",
            log_dir=tmp_path,
        )


def test_probe_reports_instead_of_raising(tmp_path: Path) -> None:
    done = process.probe([PY, "-c", "import sys; print('no'); sys.exit(2)"])
    assert (done.ok, done.status, done.stdout) == (False, 2, "no\n")
    missing = process.probe([tmp_path / "nothing"])
    assert missing.status == process.NOT_RUN and "cannot run" in missing.stderr


def test_logs_go_to_the_cache_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TFAOT_DIST_CACHE", str(tmp_path / "cache"))
    with pytest.raises(CompileFailed) as info:
        process.run([PY, "-c", "import sys; sys.exit(4)"], what="step")
    assert log_of(str(info.value)).parent == tmp_path / "cache" / "logs"


def test_an_unwritable_log_dir_falls_back_and_still_fails(
    tmp_path: Path, system_temp_in_the_run: Path
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the log directory should be
    with pytest.raises(CompileFailed) as info:
        process.run([PY, "-c", "import sys; sys.exit(5)"], what="step", log_dir=blocked / "logs")
    log = log_of(str(info.value))
    # In the system's temporary directory as it is when the log is written (the tests': conftest.py).
    assert log.is_file() and log.parent == system_temp_in_the_run / "tfaot-dist-logs"
    log.unlink()


def test_stream_writes_both_streams_to_the_file_in_order(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "print('one', flush=True)\n"
        "print('two', file=sys.stderr, flush=True)\n"
        "print('three', flush=True)\n"
        "sys.exit(4)\n"
    )
    finished = process.stream([PY, "-c", script], tmp_path / "worker.log", cwd=tmp_path)
    assert (finished.status, finished.stdout, finished.describe_status()) == (4, "", "exit 4")
    assert (tmp_path / "worker.log").read_text() == "one\ntwo\nthree\n"


def test_stream_reports_a_timeout_and_a_program_that_cannot_run(tmp_path: Path) -> None:
    slow = process.stream(
        [PY, "-c", "import time; print('started', flush=True); time.sleep(30)"],
        tmp_path / "slow.log",
        timeout=1,
    )
    assert slow.status == process.TIMED_OUT and slow.describe_status() == "timed out after 1 s"
    assert (tmp_path / "slow.log").read_text() == "started\n"  # what it wrote before it was stopped
    missing = process.stream([tmp_path / "no-such-program"], tmp_path / "missing.log")
    assert missing.status == process.NOT_RUN and "cannot run" in missing.stderr
