"""matplotlib plots of traces and measurements, one module per kind of picture: each function returns a
matplotlib Figure and leaves no pyplot state open."""
