"""The planner: which batch-invariant `Plan` (models/invariant.py) each weight shape takes on this machine.

probe.py    which row counts share a kernel, and whether a plan gives every row its lone bits
timing.py   how fast the plans that hold are, and which one a lone request and a batch prefer
choose.py   the plan of one weight shape, and of every matmul of a model
store.py    the plans kept per machine in the cache folder: a later load probes nothing

It runs once at load, in the default (batch-invariant) mode only: exact mode and
batch_invariant=False give every matmul invariant.PLAIN without probing.
"""
