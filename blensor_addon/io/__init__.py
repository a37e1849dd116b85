"""Files: the format writers (:mod:`.formats`), atomic writes (:mod:`.atomic`), output
folders with their lock, overwrite/resume policy and manifest schedule (:mod:`.outdir`)
and trajectories (:mod:`.trajectory`). Never imports bpy; the jobs that drive the scanner
into these live in :mod:`blensor_addon.jobs`."""
