"""Recording: what the caches hold, turned into events and a `Trace`. The first layer after transformers.

- `storage`: bytes of the distinct storages behind tensors (a view counts once);
- `layer_kinds`: each layer's kind (full, sliding, chunked, linear, dummy), from a model config, no torch;
- `layer_state`: what one cache layer holds now (`LayerState`, `read_layer`), read from transformers' layers;
- `slots`: the slot vocabulary and the masked share (`waste_pct`), one definition for the trace, explorer, size;
- `recorder`: turns each cache update, crop, flush and transfer into an event;
- `work`: the work behind a step's time (queries, key slots attended, attention FLOPs, packing calls), exact;
- `trace`: the events, their summaries and the JSON file (schema 4; versions 1 to 3 still load).

Nothing is imported here, so `kvlab.recording.layer_kinds` stays torch-free for the command line.
"""
