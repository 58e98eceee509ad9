"""The runs stage: a run from its settings to its directory. config (RunSpec, the settings), results (rows, cell
keys, samples), rundir (the run directory, cell by cell), evidence (each finished cell checked against its samples),
stored (the one reader of a run directory, finished or not), merge, parallel (batches across processes), trackers,
and compare (the paired statistics every report uses). Above backends."""
