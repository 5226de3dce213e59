"""matplotlib plots of traces: one module per kind of picture, each function takes a Trace (or several)."""
