"""The add-on's layers, checked from the source (``ast``; nothing is imported).

Layers, lowest first; a module may import its own layer and the layers below it, never
one above (README, docs/architecture.md)::

    core (numpy only; process/ at the same level) <- raycast <- scene (bpy) <- io
        <- jobs <- ui, cli <- the package's __init__.py

- ``core/``, ``process/``, ``raycast/`` and ``io/`` import no ``bpy``.
- ``mathutils`` is Blender's math module (it ships with Blender and pip ``bpy``, but it is
  not ``bpy``): ``core/``, ``process/`` and ``io/`` import none of it; ``raycast/`` only
  in ``raycast/bvhtree.py``, the pure-Blender fallback backend (``mathutils.bvhtree``),
  which is what that module is for. Everything from ``scene/`` up may use it.
- ``compat.py`` (differences between Blender versions) imports ``bpy`` and is imported by
  ``scene/``: it is at the scene level.
- The version string lives in ``core/version.py`` (every layer imports it from there);
  any name taken from the package's ``__init__.py`` (``__version__``, ``register``,
  ``scan``, ...) is the top level.
- No import circle: the add-on's modules, linked by every import each makes (those under
  ``TYPE_CHECKING`` and inside functions included), form no cycle; two modules that
  need one piece share it from the lower one.

Every import counts: module level and inside functions, ``import x.y`` and
``from ..x import y`` (relative imports resolved against the importing module's package),
``from . import z`` (``z`` a submodule or a name of the package's ``__init__``).
A new folder or top-level module of the add-on must be given a level here, else the
test fails naming it.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "blensor_addon"
ADDON = ROOT / PACKAGE

#: Level of each first component below the package (folder or top-level module).
LEVELS = {
    "core": 0, "process": 0,
    "raycast": 1,
    "scene": 2, "compat": 2,
    "io": 3,
    "jobs": 4,
    "ui": 5, "cli": 5,
    "__init__": 6,
}
LEVEL_NAMES = {0: "core", 1: "raycast", 2: "scene", 3: "io", 4: "jobs", 5: "ui/cli", 6: "__init__ (top)"}
#: Parts that must not import bpy at all, and where mathutils is allowed among them.
NO_BPY = ("core", "process", "raycast", "io")
MATHUTILS_ALLOWED = {f"{PACKAGE}.raycast.bvhtree"}
#: Modules that exist only inside Blender (pip ``bpy``) besides mathutils: bpy counts for all.
BLENDER_ONLY = ("bpy", "bmesh", "gpu", "bl_math", "idprop", "bpy_extras", "freestyle")


def module_name(path: Path, root: Path = ROOT) -> str:
    """Dotted name of the add-on module at ``path`` (``__init__.py`` names its package)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def part_of(module: str) -> str:
    """The first component below the package of a dotted add-on module name
    (``__init__`` for the package itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports_of(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """Every (line, absolute module) that the file at ``path`` imports, anywhere in it.

    ``from X import a`` gives ``X.a`` when ``X`` is a package of the add-on and ``a`` one of
    its submodules or subpackages, else ``X``; a name other than a submodule taken from the
    package itself gives ``blensor_addon.__init__``.
    """
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                if node.level - 1 >= len(base):
                    raise AssertionError(f"{path}:{node.lineno}: relative import above the package")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            inside = target.split(".")[0] == PACKAGE
            for alias in node.names:
                sub = root.joinpath(*target.split("."), alias.name)
                if inside and (sub.with_suffix(".py").is_file() or (sub / "__init__.py").is_file()):
                    found.append((node.lineno, f"{target}.{alias.name}"))
                elif target == PACKAGE:
                    found.append((node.lineno, f"{PACKAGE}.__init__"))
                else:
                    found.append((node.lineno, target))
    return found


def violations(root: Path = ROOT) -> dict[tuple[str, str], list[str]]:
    """Every layering violation of the add-on under ``root``:
    {(module, imported module, or "bpy" / "mathutils" / "?" for an unplaced part): [message, ...]}."""
    out: dict[tuple[str, str], list[str]] = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        mod = module_name(path, root)
        rel = path.relative_to(root)
        part = part_of(mod)
        level = LEVELS.get(part)
        if level is None:
            out.setdefault((mod, "?"), []).append(
                f"{rel}: '{part}' has no layer in tests/test_layers.py LEVELS")
            continue
        for line, target in imports_of(path, root):
            top = target.split(".")[0]
            where = f"{rel}:{line}: imports {target}"
            if top in BLENDER_ONLY and part in NO_BPY:
                out.setdefault((mod, "bpy"), []).append(f"{where} ({part}/ has no bpy)")
            elif top == "mathutils" and part in NO_BPY and mod not in MATHUTILS_ALLOWED:
                out.setdefault((mod, "mathutils"), []).append(
                    f"{where} (below scene, mathutils only in raycast/bvhtree.py)")
            elif top == PACKAGE:
                tlevel = LEVELS.get(part_of(target))
                if tlevel is None:
                    out.setdefault((mod, target), []).append(f"{where}, which has no layer")
                elif tlevel > level:
                    out.setdefault((mod, target), []).append(
                        f"{where}: {LEVEL_NAMES[tlevel]} is above {LEVEL_NAMES[level]}")
    return out


def import_cycles(root: Path = ROOT) -> list[list[str]]:
    """The import circles among the add-on's modules under ``root``, each as ``[a, b, ...,
    a]`` (``a`` imports ``b``, ...; from :class:`graphlib.CycleError`), ``[]`` when there is none.
    The graph's edges are every import of :func:`imports_of` (``X.__init__`` counted as the
    package ``X``; the implicit import of a submodule's parent packages is not an edge).
    After each circle found, its first edge is dropped and the search runs again, so every
    circle shows at least one edge of its own."""
    import graphlib
    modules = {module_name(p, root): p for p in sorted((root / PACKAGE).rglob("*.py"))}
    graph = {}
    for mod, path in modules.items():
        targets = {t.removesuffix(".__init__") for _, t in imports_of(path, root)}
        graph[mod] = {t for t in targets if t in modules and t != mod}
    found = []
    while True:
        try:
            graphlib.TopologicalSorter(graph).prepare()
            return found
        except graphlib.CycleError as exc:
            cycle = list(exc.args[1])  # each module imported by the next one
            found.append(cycle[::-1])  # each module importing the next one
            graph[cycle[1]].discard(cycle[0])


def test_layers():
    """No import of bpy below scene, none of a layer above the importer's: every new one
    is listed in the message."""
    found = violations()
    new = [msg for _, msgs in sorted(found.items()) for msg in msgs]
    assert not new, "layering violations:\n" + "\n".join(new)


def test_no_import_circle():
    """No module of the add-on imports, through any chain, a module that imports it (the
    version string and the sensor interface's protocols live below their users)."""
    found = import_cycles()
    assert not found, "import circles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_checker_finds_violations(tmp_path):
    """The checker itself, on a copy of the add-on with planted imports: bpy in io/ (inside
    a function), an upward relative import in core/, mathutils in raycast/ outside
    bvhtree.py, the package's register and its ``__version__`` from jobs/, and an unplaced
    folder are each reported; a same-layer import and the version from core/version.py are
    not. Two core modules that import each other (one only under ``TYPE_CHECKING``) are an
    import circle."""
    import shutil
    addon = tmp_path / PACKAGE
    shutil.copytree(ADDON, addon, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.dll"))
    (addon / "io" / "planted.py").write_text("def f():\n    import bpy.props\n")
    (addon / "core" / "planted.py").write_text(
        "def f():\n    from ..scene import meshes\n    from . import axes\n")
    (addon / "raycast" / "planted.py").write_text("from mathutils import Vector\n")
    (addon / "jobs" / "planted.py").write_text("from .. import register, __version__\n"
                                               "from ..core.version import __version__ as v\n")
    (addon / "jobs" / "planted_version.py").write_text("from .. import __version__\n")
    (addon / "core" / "planted_a.py").write_text("from . import planted_b\n")
    (addon / "core" / "planted_b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .planted_a import X\n")
    (addon / "extra").mkdir()
    (addon / "extra" / "__init__.py").write_text("")
    found = violations(tmp_path)
    planted = {key for key in found if key not in violations()}
    assert planted == {
        ("blensor_addon.io.planted", "bpy"),
        ("blensor_addon.core.planted", "blensor_addon.scene.meshes"),
        ("blensor_addon.raycast.planted", "mathutils"),
        ("blensor_addon.jobs.planted", "blensor_addon.__init__"),
        ("blensor_addon.jobs.planted_version", "blensor_addon.__init__"),
        ("blensor_addon.extra", "?"),
    }, planted
    planted = [set(c) for c in import_cycles(tmp_path) if c not in import_cycles()]
    assert planted == [{"blensor_addon.core.planted_a", "blensor_addon.core.planted_b"}], planted
    assert "blensor_addon/io/planted.py:2: imports bpy.props" in found[("blensor_addon.io.planted", "bpy")][0]
