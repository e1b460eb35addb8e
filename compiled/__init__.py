"""Kernels timed from their compiled code: the SASS instruction counts and timelines of the kernels that have
one (read off the code compiled for the GPU), the per-SM simulation of them, and the one prediction of a launch
that every command asks (`compiled.launch_time`)."""
