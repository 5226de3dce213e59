"""Every measurement kvlab makes, one module per concept, each named for it (`formula`, `latency`, `residency`, ...).
Data flows one way: caches -> trace -> `kvlab.measure` -> plots, bench, explorer, notebooks.
"""
