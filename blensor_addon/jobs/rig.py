"""Rigs: several sensor cameras scanned in one pass over time (issue 23, section 3).

CONTRACT STUB: filled by the lead (RigJob, scan_rig)."""
from __future__ import annotations


def scan_rig(cameras, frames, out_dir, formats=("npz",), seed=None, *, base=None, backend="auto",
             frame_of_reference="sensor", pcd_ascii=False, overwrite=False, resume=False, progress=None,
             should_cancel=None, options=None, axes="ros", time=None, overrides=None):
    """Scan ``cameras`` as one rig into ``out_dir`` (one subfolder per camera)."""
    raise NotImplementedError
