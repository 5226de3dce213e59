"""Known architectures: the facts `kvlab size` reads without transformers are what transformers derives."""

import json

import pytest

from kvlab.size.architecture import (
    _config_from_dict,
    _facts,
    architecture,
    derived_facts,
    from_config,
    known_architectures,
)


@pytest.mark.parametrize("name", known_architectures())
def test_stored_facts_are_transformers_own_reading(name):
    config = _config_from_dict(_facts()[name]["config"])
    arch = architecture(name)
    assert json.loads(json.dumps(derived_facts(config))) == derived_facts(arch.config)
    assert arch == from_config(config, name=name, source=arch.source, dtype=arch.dtype, note=arch.note)
