"""The string literals of a notebook's code cells that a reader sees: which are offered for translation, how an
f-string becomes a message, and how a translation goes back into the code without changing the code."""

from __future__ import annotations

import ast

import pytest

from tools.i18n import literals

CELL = """\
%matplotlib inline
out = model.generate(**tokenizer("The cache stores", return_tensors="pt"), cache_implementation="static")
runs = {"no cache (use_cache=False)": a, "static": b}
print("same tokens:", torch.equal(out, runs["static"]), "| layers", n)
print(f"{name:>17}: {by_step[0]:>9,} bytes after the prefill, "
      f"{by_step[-1]:,} at the end ({pct} %)")
plot_growth(trace, title=f"SmolLM2, {new} new tokens", marked_label="past the context", field="bytes_held")
plot_prefill_bars(data, "turn", "time (ms)")
ax.set_title("Bytes per layer")
widgets.IntSlider(value=4, description="new tokens")
print(" B", r"raw \\d text", f"{x:,}")
"""


def test_only_the_text_a_reader_sees_is_offered():
    assert [lit.message for lit in literals.find(CELL)] == [
        "same tokens:",
        "| layers",
        "{name:>17}: {by_step[0]:>9,} bytes after the prefill, {by_step[-1]:,} at the end ({pct} %)",
        "SmolLM2, {new} new tokens",
        "past the context",
        "turn",
        "time (ms)",
        "Bytes per layer",
        "new tokens",
    ]  # not the prompt, the dict keys, the subscript, "static", field=, a unit alone, a raw string


def test_an_f_string_message_keeps_its_fields_and_doubles_the_braces_of_its_text():
    (lit,) = literals.find('print(f"{{n}} = {n!r:>4} of {d[\'k\']}", end="")\n')
    assert lit.message == "{{n}} = {n!r:>4} of {d['k']}"
    assert lit.fields == ["{n!r:>4}", "{d['k']}"]
    (plain,) = literals.find('print("a {literal} brace")\n')
    assert plain.message == "a {literal} brace" and not plain.fields  # a plain string: braces are text
    (named,) = literals.find('print(f"x \\N{MINUS SIGN} {y} left")\n')
    assert named.fields == ["{y}"] and named.message == "x \N{MINUS SIGN} {y} left"


def test_a_translation_changes_only_the_literals():
    translations = {
        "same tokens:": "mesmos tokens:",
        "| layers": "| camadas",
        "{name:>17}: {by_step[0]:>9,} bytes after the prefill, {by_step[-1]:,} at the end ({pct} %)": (
            "{name:>17}: {by_step[0]:>9,} bytes depois do pré-preenchimento, {by_step[-1]:,} no final ({pct} %)"
        ),
        "SmolLM2, {new} new tokens": "SmolLM2, {new} tokens novos",
        "Bytes per layer": 'Bytes "por" camada',
    }
    out = literals.translate(CELL, lambda lit: translations.get(lit.message, lit.message))
    lines = out.splitlines()
    assert lines[0] == "%matplotlib inline" and lines[1:3] == CELL.splitlines()[1:3]
    assert 'print("mesmos tokens:", torch.equal(out, runs["static"]), "| camadas", n)' in out
    joined = (
        'print(f"{name:>17}: {by_step[0]:>9,} bytes depois do pré-preenchimento, {by_step[-1]:,} no final ({pct} %)")'
    )
    assert joined in out.splitlines()  # two English pieces, one Portuguese line: it fits
    assert 'ax.set_title("Bytes \\"por\\" camada")' in out  # the text's quote escaped, the piece's quote kept
    assert literals.translate(CELL, lambda lit: lit.message) == CELL  # untranslated: the English layout, as written


def printed(source: str, **names) -> str:
    """What the first argument of the cell's one `print` call evaluates to."""
    (call,) = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)]
    return eval(compile(ast.Expression(call.args[0]), "<cell>", "eval"), names)


def test_a_long_translation_is_wrapped_into_adjacent_pieces_that_fit():
    source = 'print(f"{n} tokens", end="")\n'
    long_text = "{n} " + "palavra " * 30 + "fim"
    out = literals.translate(source, lambda lit: long_text)
    assert all(len(line) <= literals.WIDTH for line in out.splitlines())
    assert len(out.splitlines()) >= 3 and out.splitlines()[1].startswith("      ")  # aligned under the first piece
    assert printed(out, n=7) == long_text.replace("{n}", "7")


def test_a_field_whose_expression_uses_the_quote_switches_the_quote():
    source = "print(f\"{row['a']} rows\")\n"
    out = literals.translate(source, lambda lit: "{row['a']} linhas \"aspas\"")
    assert printed(out, row={"a": 3}) == '3 linhas "aspas"'


@pytest.mark.parametrize(
    ("translation", "problem"),
    [
        ("{a} de", "the fields must be {a}, {b:>4}, in this order"),
        ("{b:>4} de {a}", "the fields must be {a}, {b:>4}, in this order"),
        ("{a} de {b:>5}", "the fields must be {a}, {b:>4}, in this order"),
        ("{a} de {b:>4} em 30 camadas", "the numbers of the text must stay 20"),
        ("{a} de {b:>4} {c}", "the fields must be"),
        ("{a} } {b:>4}", "a single '}'"),
    ],
)
def test_a_translation_that_does_not_fit_is_refused(translation, problem):
    (lit,) = literals.find('print(f"{a} of {b:>4} in 20 layers")\n')
    found = literals.problems(lit, translation)
    assert found and any(p.startswith(problem) for p in found), found
    with pytest.raises(ValueError, match="translation of"):
        literals.translate('print(f"{a} of {b:>4} in 20 layers")\n', lambda _lit: translation)


def test_a_quoted_header_word_may_be_translated_but_not_its_width():
    source = "print(f\"{'device peak':>12} {'moves':>6}  same\")\n"
    (lit,) = literals.find(source)
    assert literals.problems(lit, "{'pico disp.':>12} {'movim.':>6}  mesmos") == []
    assert literals.problems(lit, "{'pico disp.':>13} {'movim.':>6}  mesmos")
    out = literals.translate(source, lambda _lit: "{'pico disp.':>12} {'movim.':>6}  mesmos")
    assert printed(out) == "  pico disp. movim.  mesmos"


LABELLED = [
    'stages = {"after generate": holdings(cache), "static": 1}\nstages["4 more tokens"] = 2\n',
    'timing = time_first_token(calls, labels=("deepcopy + generate", "deepcopy alone"))\n',
    'print(stages["after generate"]["full"], timing["deepcopy alone"])\n'
    'ids = tokenizer("after generate", return_tensors="pt")\n'
    'print(f"after generate {n}")\n',
]


def test_run_labels_of_a_notebook_are_collected_from_keys_and_labels_items():
    assert literals.label_keys(LABELLED) == {"after generate", "4 more tokens", "deepcopy + generate", "deepcopy alone"}
    assert literals.label_keys(['d = {"static": 1, "one": 2}\ntokenizer({"a prompt": 1})\n']) == set()


def test_a_label_and_every_lookup_of_it_translate_together():
    labels = literals.label_keys(LABELLED)
    assert [lit.message for lit in literals.find(LABELLED[2])] == ["after generate {n}"]  # no labels: printed text
    assert [lit.message for lit in literals.find(LABELLED[2], labels)] == [
        "after generate",
        "deepcopy alone",
        "after generate {n}",  # an f-string is its own message; the tokenizer's prompt is never a label
    ]
    pt = {"after generate": "após generate", "deepcopy alone": "só a deepcopy", "4 more tokens": "mais 4 tokens"}
    out = [literals.translate(cell, lambda lit: pt.get(lit.message, lit.message), labels) for cell in LABELLED]
    assert 'stages = {"após generate": holdings(cache), "static": 1}' in out[0]
    assert 'stages["mais 4 tokens"] = 2' in out[0]
    assert 'print(stages["após generate"]["full"], timing["só a deepcopy"])' in out[2]
    assert 'tokenizer("after generate", return_tensors="pt")' in out[2]  # model input stays as it was
    namespace: dict = {}
    exec(out[0].replace("holdings(cache)", "0"), namespace)  # the translated code still finds what it stored
    assert namespace["stages"]["após generate"] == 0 and namespace["stages"]["mais 4 tokens"] == 2
