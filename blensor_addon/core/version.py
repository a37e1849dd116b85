"""The add-on's version string, ``blensor_addon.__version__``: kept in ``core`` so that
every layer (io's LAS header, the jobs' manifests, the command's ``--version``) reads it
from below, never from the package's ``__init__.py``. ``blender_manifest.toml`` and
``pyproject.toml`` carry the same value (``tests/test_extension.py`` checks it)."""
from __future__ import annotations

__version__ = "0.1.0"
