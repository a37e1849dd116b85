"""Kill rate per module of a finished ``mutmut run`` (tools/mutation.sh runs it in the run's folder).

Reads mutmut's results (``mutants/<module>.py.meta``: mutant name -> the tests' exit code), leaves
out the equivalent mutants listed in ``tools/mutation_equivalent.txt`` (each with the line it
changes and why no test can tell it from the original), prints one line per mutated module
(``killed / counted = rate``), then every mutant that was not killed with its diff, and exits 1
when a module's rate is under ``--min`` percent (default 90), 2 when there are no results.

Also left out, and counted: a mutant that changes only the type ``typing.cast`` is given (the
annotations' casts; ``cast`` returns its value unchanged at run time).

A mutant is killed when its tests fail (mutmut's ``killed``), run past their time limit
(``timeout``: a mutant that loops) or crash (``segfault``). ``survived`` (the tests pass) and
``no tests`` (no selected test reaches the mutated function) count against the rate.

Usage: python tools/mutation_report.py EQUIVALENT_FILE [--min 90] (in the folder holding mutants/).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

from mutmut.mutation.diff_apply import get_diff_for_mutant
from mutmut.stats import status_by_exit_code

KILLED = ("killed", "timeout", "segfault")
#: a call of typing.cast (``cast(`` or ``typing.cast(``, not ``broadcast(``)
CAST = re.compile(r"(?<!\w)cast\(")


def changed_lines(name: str, path: str) -> list[str]:
    """The ``-``/``+`` lines of the mutant's diff, stripped."""
    diff = get_diff_for_mutant(name, path=path)
    return [line[1:].strip() for line in diff.splitlines()
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def without_cast_types(line: str) -> str:
    """``line`` with the first argument of every ``cast(`` call replaced by ``_``."""
    out, i = [], 0
    while (m := CAST.search(line, i)) is not None:
        j = m.start()
        k, depth = j + 5, 0
        while k < len(line) and not (depth == 0 and line[k] in ",)"):
            depth += (line[k] in "([{") - (line[k] in ")]}")
            k += 1
        out.append(line[i:j + 5] + "_")
        i = k
    return "".join(out) + line[i:]


def only_a_cast_type(name: str, path: str) -> bool:
    """The mutant changes only the type given to ``typing.cast``, which returns its value
    argument unchanged at run time (the type is the checker's): an equivalent mutant."""
    diff = get_diff_for_mutant(name, path=path).splitlines()
    old = [ln[1:] for ln in diff if ln.startswith("-") and not ln.startswith("---")]
    new = [ln[1:] for ln in diff if ln.startswith("+") and not ln.startswith("+++")]
    return (len(old) == len(new) > 0 and old != new
            and [without_cast_types(ln) for ln in old] == [without_cast_types(ln) for ln in new])


def load_equivalent(path: Path) -> dict[str, str]:
    """``tools/mutation_equivalent.txt``: mutant name -> the ``+`` line it must change to.

    Format: blocks of three lines, ``NAME``, ``+ MUTATED LINE`` and ``# REASON``; blank lines
    and other comment lines between blocks are skipped."""
    out: dict[str, str] = {}
    lines = [ln.rstrip("\n") for ln in path.read_text(encoding="utf-8").splitlines()]
    i = 0
    while i < len(lines):
        ln = lines[i].strip()
        if not ln or ln.startswith("#"):
            i += 1
            continue
        if i + 2 >= len(lines) or not lines[i + 1].startswith("+ ") or not lines[i + 2].startswith("# "):
            sys.exit(f"mutation: {path}:{i + 1}: expected NAME, '+ MUTATED LINE', '# REASON'")
        out[ln] = lines[i + 1][2:].strip()
        i += 3
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the per-module kill rates and the survivors; the exit status (see the module)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("equivalent", type=Path)
    ap.add_argument("--min", type=float, default=90.0)
    args = ap.parse_args(argv)
    equivalent = load_equivalent(args.equivalent)
    metas = sorted(Path("mutants").rglob("*.py.meta"))
    if not metas:
        print("mutation: no results under mutants/ (did mutmut run?)", file=sys.stderr)
        return 2
    low, seen, report = [], set(), []
    for meta in metas:
        path = str(meta.relative_to("mutants"))[:-len(".meta")]
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        if not codes:
            continue
        status = {k: status_by_exit_code[v] for k, v in codes.items()}
        excluded, casts, survivors = 0, 0, []
        for name, st in status.items():
            if st in KILLED:
                continue
            if only_a_cast_type(name, path):
                casts += 1
                continue
            if name in equivalent:
                seen.add(name)
                if equivalent[name] in changed_lines(name, path):
                    excluded += 1
                    continue
                survivors.append((name, st, "listed as equivalent, but its change differs now"))
            else:
                survivors.append((name, st, ""))
        counted = len(status) - excluded - casts
        killed = sum(st in KILLED for st in status.values())
        rate = 100.0 * killed / counted if counted else 100.0
        tally = Counter(status.values())
        counts = ", ".join(f"{k} {v}" for k, v in sorted(tally.items()))
        print(f"{path}: {killed} of {counted} mutants killed = {rate:.1f} % (left out as equivalent: "
              f"{excluded} listed, {casts} of a cast's type; {counts})")
        if rate < args.min:
            low.append(path)
        report += [(path, *s) for s in survivors]
    for path, name, st, note in report:
        print(f"\n{st}: {name} ({path}){' ' + note if note else ''}")
        print("\n".join("    " + ln for ln in get_diff_for_mutant(name, path=path).splitlines()[2:]))
    for name in sorted(set(equivalent) - seen):
        print(f"mutation: {name} is listed as equivalent but was killed or not generated", file=sys.stderr)
    if low:
        print(f"mutation: under {args.min:g} % killed: {', '.join(low)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
