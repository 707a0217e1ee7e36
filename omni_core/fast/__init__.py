"""Fast paths of the decode steps, each tested equal to eager (the reference).

predictors.py  Predictors: the code predictor's path, chosen once per pipeline
buckets.py     the one table of batch buckets (compiled frames and CUDA graphs)
compiled.py    compiled predictor frames (ahead of time) and one-token decode steps (torch.compile)
packages.py    compiled frames kept across processes: AOTInductor packages in the cache folder
cuda_graph.py  the re-prefill predictor captured as CUDA graphs
"""
