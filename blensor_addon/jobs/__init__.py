"""Jobs that drive Blender and the scanner into files: range scans (every format of the
registry) and depth-map exports. They sit above ``scene/`` and ``io/``."""
