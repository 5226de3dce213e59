"""`kvlab.strategies.load`: a strategy named by its class or by "FILE.py:ClassName" is imported from the file's path
and checked before any model loads; every mistake is one `StrategyError` line naming what is valid."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from transformers import cache_utils as cu

from kvlab.errors import KvlabUserError
from kvlab.strategies.load import (
    StrategyError,
    check_strategy,
    is_strategy,
    layer_factory,
    load_strategy,
    strategy_facts,
    strategy_name,
)

FILE = Path(__file__).parent / "keep_ends.py"
SPEC = f"{FILE}:KeepEnds"


def refused(cache, match: str, **options) -> str:
    with pytest.raises(StrategyError, match=match) as err:
        check_strategy(cache, options)
    message = str(err.value)
    assert "\n" not in message and isinstance(err.value, KvlabUserError)
    return message


def test_a_file_and_class_name_loads_the_class_once_per_version_of_the_file():
    layer_class = load_strategy(SPEC)
    assert layer_class.__name__ == "KeepEnds" and issubclass(layer_class, cu.DynamicLayer)
    assert load_strategy(SPEC) is layer_class  # imported once: the same class, so the same twin and reader
    assert is_strategy(SPEC) and is_strategy(layer_class) and not is_strategy("dynamic")
    assert strategy_name(SPEC) == strategy_name(layer_class) == "KeepEnds" and strategy_name("static") == "static"
    assert strategy_facts(layer_class, {"last": 3}) == {"name": "KeepEnds", "file": str(FILE), "options": {"last": 3}}


def test_a_file_edited_is_imported_again(tmp_path):
    file = tmp_path / "mine.py"
    file.write_text("from transformers.cache_utils import DynamicLayer\nclass Mine(DynamicLayer):\n    size = 1\n")
    first = load_strategy(f"{file}:Mine")
    file.write_text("from transformers.cache_utils import DynamicLayer\nclass Mine(DynamicLayer):\n    size = 2\n")
    os.utime(file, ns=(1, file.stat().st_mtime_ns + 10**9))
    assert first.size == 1 and load_strategy(f"{file}:Mine").size == 2


def test_a_missing_file_or_class_is_one_line_naming_what_exists(tmp_path):
    refused(f"{tmp_path}/nowhere.py:KeepEnds", "strategy file .*nowhere.py does not exist")
    message = refused(f"{FILE}:Keep", "keep_ends.py has no class 'Keep'")
    assert message.endswith("its layer classes: KeepEnds")
    broken = tmp_path / "broken.py"
    broken.write_text("import does_not_exist\n")
    refused(f"{broken}:X", "strategy file .*broken.py failed to import: ModuleNotFoundError: No module named")


def test_what_is_not_a_layer_class_kvlab_reads_is_refused_by_name():
    refused(f"{FILE}:NotALayer", "NotALayer is not a transformers cache layer class; a strategy subclasses")
    refused(f"{FILE}:torch", "torch is not a transformers cache layer class")

    class Chunks(cu.CacheLayerMixin):
        pass

    refused(Chunks, "kvlab reads the slots of DynamicLayer and StaticLayer subclasses, and Chunks subclasses neither")


def test_options_are_the_layers_keyword_arguments():
    layer_class, given = check_strategy(SPEC, {"last": 3, "first": None})  # None: unset
    assert given == {"last": 3}
    layer = layer_factory(layer_class, given)()
    assert (layer.first, layer.last) == (2, 3) and layer_factory(layer_class, {}) is layer_class
    refused(SPEC, r"KeepEnds takes no option window; valid: first, last", window=8)

    class Needs(cu.DynamicLayer):
        def __init__(self, window):
            super().__init__()

    refused(Needs, "Needs needs window: transformers builds each layer with no argument, so give them defaults")
