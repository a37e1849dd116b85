"""The mutation run's setup (tools/mutation.sh, pyproject.toml's [tool.mutmut]; docs/testing.md):
what it mutates and runs stays numpy-only, one module of each kind, and its list of equivalent
mutants is well formed. The run itself is a CI step of its own (.ci/run), not a test."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]

_spec = importlib.util.spec_from_file_location("mutation_report", ROOT / "tools" / "mutation_report.py")


def report_module():
    """tools/mutation_report.py as a module (it imports mutmut, of the test extra)."""
    mod = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(mod)
    return mod


def test_one_module_of_each_kind_is_mutated_and_neither_it_nor_its_tests_import_bpy():
    mutated = CONFIG["only_mutate"]
    kinds = {p.split("/")[1] + ("/sensors" if "/sensors/" in p else "") for p in mutated}
    assert {"core/sensors", "io", "jobs"} <= kinds, mutated
    assert all((ROOT / p).is_file() for p in mutated + CONFIG["pytest_add_cli_args_test_selection"])
    modules = [p[:-3].replace("/", ".") for p in mutated]
    tests = [p[:-3].replace("/", ".").removeprefix("tests.")
             for p in CONFIG["pytest_add_cli_args_test_selection"]]
    code = ("import sys; sys.path.insert(0, 'tests'); import importlib\n"
            f"for m in {modules + tests!r}: importlib.import_module(m)\n"
            "assert not [m for m in sys.modules if m.split('.')[0] in ('bpy', 'mathutils', 'bmesh')]")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


def test_the_equivalent_mutants_list_names_mutants_of_the_mutated_modules_with_a_reason():
    report = report_module()
    listed = report.load_equivalent(ROOT / "tools" / "mutation_equivalent.txt")
    assert listed
    prefixes = tuple(p[:-3].replace("/", ".") + "." for p in CONFIG["only_mutate"])
    for name, line in listed.items():
        assert name.startswith(prefixes) and "__mutmut_" in name, name
        assert line, name


def test_a_cast_of_another_type_is_the_same_program_and_other_changes_are_not():
    w = report_module().without_cast_types
    assert w("return cast(dict[str, Any], f(a, b))") == w("return cast(None, f(a, b))")
    assert w("return cast(None, f(a, b))") == "return cast(_, f(a, b))"
    assert w('x = typing.cast("T", y)') == w('x = typing.cast("XXTXX", y)')
    assert w("return cast(F64, f(a, b))") != w("return cast(F64, f(a, c))")
    assert w("broadcast(a, b)") == "broadcast(a, b)"
