from kvlab.recording.recorder import Recorder


def test_a_step_starts_when_a_layer_operation_repeats():
    rec = Recorder()
    order = [
        ("self", 0, "read"),
        ("self", 0, "conv"),
        ("self", 0, "recurrent"),
        ("self", 1, "kv"),
        ("cross", 1, "kv"),
        ("self", 0, "read"),
        ("self", 1, "kv"),
        ("self", 0, "read"),
    ]
    steps = []
    for role, layer, op in order:
        rec.begin(role, layer, op)
        steps.append(rec.step)
    assert steps == [0, 0, 0, 0, 0, 1, 1, 2]
