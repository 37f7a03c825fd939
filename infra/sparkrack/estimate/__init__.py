"""The decode estimate, pure: the decode model, its calibration rows, the fitter and N streams.
The Plan applies it to a stack (`plan/perf.py`); it never imports the planner."""
