"""Fast paths of the decode steps, each tested equal to eager (the reference).

predictors.py  Predictors: the code predictor's path, chosen once per pipeline
buckets.py     the one table of batch buckets (compiled frames and CUDA graphs)
compiled.py    torch.compile'd predictor frames and one-token decode steps
cuda_graph.py  the re-prefill predictor captured as CUDA graphs
"""
