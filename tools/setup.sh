#!/usr/bin/env bash
# Set up from nothing: a virtual environment with Python 3.11, pinned bpy and numpy<2
# (pyproject.toml), then build the native ray-cast library into build/native/.
#
#   bash tools/setup.sh                      .venv with bpy 5.0.1: what the quick start's scan needs
#   BLENSOR_EXTRAS=test bash tools/setup.sh  + the test readers (Open3D, pypcd4) and Embree
#   BLENSOR_BPY=4.2.23 bash tools/setup.sh   .venv-bpy4.2.23 with that Blender instead (4.2 LTS,
#                                            4.5 LTS and 5.0 are supported)
#
# Prints the environment's folder as its last line. Idempotent: a second run only
# rebuilds the native library. Fails if pip left numpy >= 2 (bpy 4.2-5.0 need 1.x).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
BPY_DEFAULT=5.0.1
BPY=${BLENSOR_BPY:-$BPY_DEFAULT}
EXTRAS=${BLENSOR_EXTRAS:-}
if [ "$BPY" = "$BPY_DEFAULT" ]; then VENV=.venv; else VENV=.venv-bpy$BPY; fi
if ! command -v "$PY" >/dev/null 2>&1; then
  echo "setup: $PY not found; bpy $BPY needs Python 3.11 (set PYTHON=/path/to/python3.11)" >&2
  exit 1
fi
if [ -n "$EXTRAS" ] && ! ldconfig -p 2>/dev/null | grep -q 'libusb-1.0.so.0'; then
  # Open3D's wheel (a test reader) links libusb-1.0; install it where apt is available.
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq libusb-1.0-0) >/dev/null 2>&1 \
      || echo "setup: could not install libusb-1.0-0 (Open3D tests will fail)" >&2
  else
    echo "setup: libusb-1.0 missing (Open3D needs it; install libusb-1.0-0)" >&2
  fi
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
stamp=$VENV/.blensor-setup
want=$( (cat pyproject.toml tools/setup.sh; echo "$BPY $EXTRAS") | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  "$VENV/bin/python" -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" >&2 || true
  # Dask for --workers, matplotlib for --formats preview (optional to pip users: blensor[dask,preview])
  spec=".[dask,preview${EXTRAS:+,$EXTRAS}]"
  # PYTHONWARNINGS: no setuptools banners from the editable build
  PYTHONWARNINGS=ignore "$VENV/bin/python" -m pip install -q -e "$spec" "bpy==$BPY" 2>&1 \
    | grep -v "^WARNING: Location" >&2 || true
  "$VENV/bin/python" - "$BPY" <<'PYCHECK'
import sys
import bpy
import numpy
if int(numpy.__version__.split(".")[0]) >= 2:
    sys.exit(f"setup: numpy {numpy.__version__} was installed; bpy needs numpy 1.x (pin the package that pulled it)")
if not bpy.app.version_string.startswith(sys.argv[1].rsplit(".", 1)[0]):
    sys.exit(f"setup: bpy {bpy.app.version_string} installed, {sys.argv[1]} asked for")
PYCHECK
  echo "$want" > "$stamp"
fi
"$VENV/bin/python" native_patch/build.py >&2
echo "$VENV"
