"""Fast paths of the decode steps, each tested equal to eager (the reference).

predictors.py      Predictors: the code predictor's path, chosen once per pipeline
buckets.py         the one table of batch buckets (compiled decode steps and CUDA graphs)
units.py           a compiled unit: one small function compiled once, its variants kept in one file
compiled.py        the compiled predictor: one predictor step (a unit) called 15 times a frame
compiled_steps.py  the thinker's and the talker's decode steps: one decoder layer (a unit) for every layer
packages.py        the cache folder's compiled files: names, locks, pruning
cuda_graph.py      the re-prefill predictor captured as CUDA graphs
"""
