"""kvlab/caches/kinds.py: the one table of the cache kinds kvlab instruments, and the maps read from it."""

from __future__ import annotations


def test_the_table_of_kinds_covers_every_cache_kind_once():
    from kvlab.cache_kinds import CACHE_KINDS
    from kvlab.caches.adopt import TWIN_KINDS, TWINS
    from kvlab.caches.factory import CACHE_CLASSES
    from kvlab.caches.kinds import KINDS

    names = [kind.name for kind in KINDS]
    assert sorted(names) == sorted(set(CACHE_KINDS) - {"none"}) and len(set(names)) == len(names)
    for kind in KINDS:  # each twin is the class it stands for, plus recording: same transformers class
        assert issubclass(kind.instrumented, kind.transformers_class)
        assert CACHE_CLASSES[kind.name] is TWINS[(kind.transformers_class, kind.offloading)] is kind.instrumented
        assert TWIN_KINDS[kind.instrumented] == kind.name
