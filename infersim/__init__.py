"""The command-line application: queries, runs, comparisons, validation reports and the files they write.

The top layer: it may import every other package (hwmodels <- workloads <- compiled <- simulator <- traces <-
validation <- infersim).
"""
