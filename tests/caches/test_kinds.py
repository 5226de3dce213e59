"""kvlab/caches/kinds.py: the instrumented class of every cache kind of the one table, and the maps read from it."""

from __future__ import annotations


def test_every_cache_kind_generate_builds_has_one_twin_of_its_own_class():
    from kvlab.cache_kinds import CACHE_KINDS, KINDS
    from kvlab.caches.adopt import TWIN_KINDS, TWINS
    from kvlab.caches.factory import CACHE_CLASSES
    from kvlab.caches.kinds import INSTRUMENTED, transformers_class

    built = [kind for kind in KINDS if kind.twin]
    assert sorted(INSTRUMENTED) == sorted(set(CACHE_KINDS) - {"none"})
    assert len(set(INSTRUMENTED.values())) == len(INSTRUMENTED)
    for kind in built:  # each twin is the class it stands for, plus recording: same transformers class
        twin = INSTRUMENTED[kind.name]
        assert issubclass(twin, transformers_class(kind)) and twin.__name__ == kind.twin
        assert CACHE_CLASSES[kind.name] is TWINS[(transformers_class(kind), kind.offloads)] is twin
        assert TWIN_KINDS[twin] == kind.name
