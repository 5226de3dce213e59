"""kvlab/units.py: the one table of byte units, for printed numbers and figure axes alike."""

from kvlab.units import binary_unit, human_bytes


def test_the_unit_is_the_largest_the_value_reaches():
    assert binary_unit(3 * 2**30) == ("GiB", 2**30)
    assert binary_unit(5 * 2**20) == ("MiB", 2**20)
    assert binary_unit(2**10) == ("KiB", 2**10)
    assert binary_unit(100) == ("B", 1)
    assert binary_unit(-5 * 2**20) == ("MiB", 2**20)  # a saving drawn below zero keeps its unit


def test_human_bytes_is_exact_below_a_kib_then_in_the_unit():
    assert human_bytes(1000) == "1,000 B"
    assert human_bytes(1536) == "1.50 KiB"
