"""The `kvlab bench --batching` row: continuous batching against one request at a time.

The measurement lives in `kvlab.measure.batching` (notebook 12 calls it too); this is the bench's name for it.
"""

from kvlab.measure.batching import batching_row

__all__ = ["batching_row"]
