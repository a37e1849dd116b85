#!/usr/bin/env bash
# Mutation testing (docs/testing.md): mutmut mutates the modules of pyproject.toml's [tool.mutmut]
# (one each of the return physics, the formats and the job plan: numpy-only) and runs the bpy-free
# tests listed there against every mutant; then tools/mutation_report.py prints the kill rate per
# module and the mutants that were not killed, and fails under 90 % (equivalent mutants, listed
# with their reason in tools/mutation_equivalent.txt, are left out of the count).
# Runs in build/mutation, a fresh copy of the tree (mutmut writes its mutants/ there); the whole
# run is bounded by MUTATION_TIMEOUT seconds (default 300). Uses the test environment's mutmut
# (BLENSOR_EXTRAS=test bash tools/setup.sh; VENV=... for another). Exit: 0 every module at or above
# 90 %, 1 one under (or the run failed or ran out of time).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=${VENV:-$root/.venv}
limit=${MUTATION_TIMEOUT:-300}
work=$root/build/mutation
if [ ! -x "$venv/bin/mutmut" ]; then
  echo "mutation: $venv/bin/mutmut not found (BLENSOR_EXTRAS=test bash tools/setup.sh installs it)" >&2
  exit 1
fi
rm -rf "$work"
mkdir -p "$work"
tar -c --exclude=__pycache__ --exclude='*.pyc' pyproject.toml blensor_addon tests native_patch \
  | tar -x -C "$work"
cd "$work"
t0=$SECONDS
echo "mutation: mutmut $("$venv/bin/python" -c 'import mutmut; print(mutmut.__version__)'), at most $limit s"
rc=0
timeout "$limit" "$venv/bin/mutmut" run >mutmut.log 2>&1 || rc=$?
if [ "$rc" != 0 ]; then
  # the progress line is redrawn in place: the log's last lines say why it stopped
  tr '\r' '\n' <mutmut.log | tail -n 25 >&2
  if [ "$rc" = 124 ]; then
    echo "mutation: mutmut ran past $limit s (MUTATION_TIMEOUT); the log is $work/mutmut.log" >&2
  else
    echo "mutation: mutmut failed (exit $rc); the log is $work/mutmut.log" >&2
  fi
  exit 1
fi
echo "mutation: mutmut ran in $((SECONDS - t0)) s"
"$venv/bin/python" "$root/tools/mutation_report.py" "$root/tools/mutation_equivalent.txt"
