"""Fast paths of the decode steps, each tested equal to eager (the reference).

predictors.py      Predictors: the code predictor's path, chosen once per pipeline
buckets.py         the one table of batch buckets (compiled frames and CUDA graphs)
compiled.py        compiled predictor frames, compiled ahead of time and kept in the cache folder
compiled_steps.py  compiled decode steps of the thinker and the talker, kept there too
packages.py        the cache folder's compiled files: names, AOTInductor packages, pruning
cuda_graph.py      the re-prefill predictor captured as CUDA graphs
"""
