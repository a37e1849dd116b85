"""What a run prints as it goes: a tqdm bar on a terminal, plain lines (no carriage
returns) in a log or pipe; ``--quiet`` keeps the final one-line summary, ``--quiet
--quiet`` prints nothing but errors."""
from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import termios

from conftest import CROSSING
from test_faults import BLENSOR, run

SUMMARY = re.compile(r"blensor: 2 sweeps, \d+ points, [\d.]+ s \(\w+\) -> .+")


def test_a_log_gets_plain_lines_and_the_summary(tmp_path):
    res = run("scan", CROSSING, "--frames", "1-3", "--out", tmp_path / "o")
    assert res.returncode == 0, res.stderr
    assert "\r" not in res.stderr + res.stdout
    lines = res.stderr.splitlines()
    assert [re.sub(r", \d+ points$", "", ln) for ln in lines] == ["blensor: 1/2 scans",
                                                                 "blensor: 2/2 scans"]
    assert all(re.fullmatch(r"blensor: \d/2 scans, \d+ points", ln) for ln in lines), lines
    assert SUMMARY.fullmatch(res.stdout.strip()), res.stdout


def test_quiet_keeps_the_summary_and_twice_silences_it(tmp_path):
    once = run("scan", CROSSING, "--frames", "1-3", "--out", tmp_path / "a", "--quiet")
    assert once.returncode == 0 and once.stderr == "", once.stderr
    assert SUMMARY.fullmatch(once.stdout.strip()) and once.stdout.count("\n") == 1, once.stdout
    twice = run("scan", CROSSING, "--frames", "1-3", "--out", tmp_path / "b", "--quiet", "--quiet")
    assert twice.returncode == 0 and twice.stdout == "" and twice.stderr == ""
    for cmd in (("depth", "--frames", "1"), ("motion", "--frames", "1")):
        one = run(*cmd, CROSSING, "--out", tmp_path / f"{cmd[0]}1", "--quiet")
        two = run(*cmd, CROSSING, "--out", tmp_path / f"{cmd[0]}2", "--quiet", "--quiet")
        assert one.returncode == two.returncode == 0, one.stderr + two.stderr
        assert one.stdout.startswith("blensor: ") and one.stdout.count("\n") == 1 and one.stderr == ""
        assert two.stdout == "" and two.stderr == ""


def test_a_terminal_still_gets_the_bar(tmp_path):
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # (0 columns: no bar)
    try:
        proc = subprocess.Popen([BLENSOR, "scan", str(CROSSING), "--frames", "1-3", "--out",
                                 str(tmp_path / "o")], stdout=subprocess.PIPE, stderr=slave,
                                stdin=subprocess.DEVNULL)
        os.close(slave)
        out = proc.communicate(timeout=120)[0].decode()
        seen = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(master)
    assert proc.returncode == 0 and SUMMARY.fullmatch(out.strip())
    assert b"\r" in seen and re.search(rb"blensor: +100%\|[^|]*\| 2/2 ", seen), seen
