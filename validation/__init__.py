"""Ground truth: measured kernel times (`validation/data/<gpu>/*.csv`) and how they were taken.

Importing this package needs neither torch nor a GPU; `validation.measure` imports them lazily.
"""
