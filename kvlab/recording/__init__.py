"""Recording: what the caches hold, turned into events and a `Trace` (schema 6; versions 1 to 5 still load).

Nothing is imported here, so `kvlab.recording.layer_kinds` stays torch-free for the command line.
"""
