"""BlenSor: range-sensor simulation for Blender (LiDAR scans with exact ground truth)."""
__version__ = "0.1.0"
