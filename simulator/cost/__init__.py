"""The cost layer: the time of kernels, collectives, engine steps and engine cycles on one deployment.

It stands between what is computed (`workloads`) and the serving simulation (`simulator`): the
serving loop asks it one question per engine cycle. No simpy here, and nothing of the serving state.
"""
