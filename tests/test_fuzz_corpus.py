"""The fuzz corpus (``tests/data/fuzz/make_corpus.py``) through the real ``blensor``
command: every entry ends within 60 s and 2 GiB of resident memory, with an allowed exit
code (0, 2; 1 where a run failure is right), never by a signal, never with a traceback;
a refusal is one line ``blensor: error: ...``; no raw control character reaches stderr;
no temporary file or lock is left, nothing in ``$TMPDIR``; after exit 2 the entry's
files are as they were (nothing written, nothing deleted, a FIFO still a FIFO).

Run one entry: ``pytest tests/test_fuzz_corpus.py -k NAME``; the whole corpus is
deselected with ``-m 'not fuzz'``; ``python tests/data/fuzz/make_corpus.py DIR`` writes
it for a run by hand."""
from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_faults import BLENSOR

_SPEC = importlib.util.spec_from_file_location(
    "make_corpus", Path(__file__).parent / "data" / "fuzz" / "make_corpus.py")
corpus = sys.modules[_SPEC.name] = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(corpus)
ENTRIES = {e.name: e for e in corpus.ENTRIES}

#: wall-clock bound of one command (s): a hang ends the test there
TIME_LIMIT = 60.0
#: bound of the resident memory of the command and its child processes (bytes)
MEMORY_LIMIT = 2 << 30
#: control characters that must never reach the terminal raw (tab, newline and a progress
#: bar's carriage return may)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

#: bytes per unit of ``ru_maxrss`` (kilobytes on Linux, bytes on macOS)
_MAXRSS_UNIT = 1 if sys.platform == "darwin" else 1024

pytestmark = pytest.mark.fuzz


def _tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and its descendants now (0 for a process gone)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                total += next((int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmRSS:")), 0)
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return total


def run_bounded(argv: list[str], cwd: Path, env: dict, time_limit: float = TIME_LIMIT,
                memory_limit: int = MEMORY_LIMIT) -> SimpleNamespace:
    """Run ``argv`` in its own session within ``time_limit`` (s) and ``memory_limit``
    (bytes of resident memory): its process tree is polled every 20 ms and killed past
    either; the peak is also taken from ``wait4``'s rusage, which covers what a poll
    misses. stdout and stderr go to files beside ``cwd``.

    Returns returncode (negative: the signal that ended it), stdout, stderr (text),
    peak (bytes), seconds (wall clock), cpu (s, user and system) and killed ("" or why
    the bound killed it)."""
    out, err = cwd.parent / f"{cwd.name}.stdout", cwd.parent / f"{cwd.name}.stderr"
    t0 = time.monotonic()
    with open(out, "wb") as so, open(err, "wb") as se:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=so, stderr=se, cwd=cwd, env=env,
                                start_new_session=True)
    peak, killed = 0, ""
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        peak = max(peak, _tree_rss(proc.pid))
        if peak > memory_limit:
            killed = f"resident memory over {memory_limit >> 20} MiB"
        elif time.monotonic() - t0 > time_limit:
            killed = f"no answer after {time_limit:g} s"
        if killed:
            os.killpg(proc.pid, signal.SIGKILL)
            _, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.02)
    seconds = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)  # (reaped here, not by Popen)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # whatever it left running (workers, a child Blender)
    except ProcessLookupError:
        pass
    return SimpleNamespace(returncode=proc.returncode, stdout=out.read_text(errors="replace"),
                           stderr=err.read_text(errors="replace"),
                           peak=max(peak, usage.ru_maxrss * _MAXRSS_UNIT), seconds=seconds,
                           cpu=usage.ru_utime + usage.ru_stime, killed=killed)


def snapshot(folder: Path) -> dict[str, tuple]:
    """Every file, FIFO and link below ``folder`` (relative path -> kind and, for a
    regular file, its sha256)."""
    out = {}
    for p in folder.rglob("*"):
        st = os.lstat(p)
        if stat.S_ISDIR(st.st_mode):
            continue
        rel = p.relative_to(folder).as_posix()
        if stat.S_ISREG(st.st_mode):
            out[rel] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
        else:
            out[rel] = (stat.S_IFMT(st.st_mode),)
    return out


@pytest.mark.parametrize("code,limit,why", [
    ("import time; time.sleep(120)", 1.0, "no answer after 1 s"),
    # (a time bound far above the start and the 300 MiB on a loaded machine: the memory ends it)
    ("import time; b = b'x' * (300 << 20); time.sleep(120)", 60.0, "resident memory over 100 MiB"),
])
def test_the_bounds_end_a_hang_and_a_memory_hog(tmp_path, code, limit, why):
    (tmp_path / "w").mkdir()
    res = run_bounded([sys.executable, "-c", code], tmp_path / "w", dict(os.environ), time_limit=limit,
                      memory_limit=100 << 20)
    assert (res.killed, res.returncode) == (why, -signal.SIGKILL)
    assert res.seconds < 100  # (killed at the bound, not at the end of the sleep)


@pytest.mark.parametrize("name", list(ENTRIES))
def test_fuzz_entry(name, tmp_path):
    entry = ENTRIES[name]
    folder = tmp_path / "entry"
    folder.mkdir()
    entry.make(folder)
    before = snapshot(folder)
    temp = tmp_path / "tmp"  # Blender's and Python's temporary files, away from the entry
    temp.mkdir()
    # BLENSOR_DEBUG=1 would print tracebacks after the error line on purpose
    env = {**{k: v for k, v in os.environ.items() if k != "BLENSOR_DEBUG"}, "TMPDIR": str(temp)}
    res = run_bounded([BLENSOR, *entry.command(folder)], folder, env)
    faults = []
    if res.killed:
        faults.append(res.killed)
    elif res.returncode < 0:
        faults.append(f"ended by signal {signal.Signals(-res.returncode).name}")
    if res.peak > MEMORY_LIMIT:
        faults.append(f"peak resident memory {res.peak >> 20} MiB")
    if "Traceback" in res.stderr or "Exception ignored" in res.stderr:
        faults.append("a traceback on stderr")
    if _CONTROL.search(res.stderr):
        faults.append("raw control characters on stderr")
    if res.returncode not in entry.exits:
        faults.append(f"exit {res.returncode}, not one of {entry.exits}")
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("blensor: error")]
    if res.returncode > 0 and (len(lines) != 1 or not lines[0].startswith("blensor: error: ")):
        faults.append(f"{len(lines)} lines on stderr, not one 'blensor: error: ...'")
    elif res.returncode > 0 and entry.says not in lines[0]:
        faults.append(f"the error line does not name {entry.says!r}")
    elif res.returncode == 0 and errors:
        faults.append("exit 0 after an error line")
    after = snapshot(folder)
    left = [rel for rel in after if rel not in before
            and (rel.endswith(".part") or rel.rsplit("/", 1)[-1] == ".blensor.lock")]
    if left:
        faults.append(f"temporary files or a lock left behind: {left}")
    faults += [f"{rel} changed" for rel in entry.keep if after.get(rel) != before[rel]]
    if not res.killed and any(temp.iterdir()):
        faults.append(f"left in TMPDIR: {sorted(p.name for p in temp.iterdir())}")
    if res.returncode == 2 and after != before:  # bad input: nothing written, nothing deleted
        changed = sorted(k for k in set(after) | set(before) if after.get(k) != before.get(k))
        faults.append(f"files changed: {changed}")
    if faults:
        pytest.fail("; ".join(faults) + f"\nblensor {' '.join(entry.command(folder))}\n"
                    f"exit {res.returncode}, {res.seconds:.1f} s, {res.peak >> 20} MiB\n"
                    f"stderr:\n{res.stderr[-3000:]}", pytrace=False)
