"""Proofreading the Portuguese: one word per concept (kvlab/i18n/terms_pt_BR.toml), Portuguese number marks, and no
English left where a reader of the pt-BR notebooks looks: printed outputs, plot and widget labels.

The catalogs are read as text, never executed: every test here takes well under a second.
"""

from __future__ import annotations

import ast
import functools
import re
import tomllib
from pathlib import Path

import jupytext
import nbformat
import pytest
import transformers
from babel.messages.pofile import read_po

from kvlab import i18n as kvlab_i18n
from kvlab.i18n import catalog_path
from kvlab.serving import load_workload
from tools.i18n import literals
from tools.i18n import notebooks as i18n

TERMS_FILE = Path(kvlab_i18n.__file__).with_name("terms_pt_BR.toml")
TERMS = tomllib.loads(TERMS_FILE.read_text(encoding="utf-8"))
CATALOGS = sorted((i18n.NOTEBOOKS / "locale" / "pt_BR").glob("*.po")) + [catalog_path("pt-BR")]
PT_NOTEBOOKS = sorted((i18n.NOTEBOOKS / "pt-BR").glob("[0-9][0-9]_*.ipynb"))


def messages(path: Path) -> list[tuple[str, object]]:
    """(catalog file name, message) for every translated message of the catalog at `path`."""
    with path.open("rb") as handle:
        return [(path.name, m) for m in read_po(handle) if m.id and m.string and not _skipped(m.id)]


every_catalog = pytest.mark.parametrize("catalog", CATALOGS, ids=lambda path: path.stem)


def _skipped(message_id: str) -> bool:
    return any(message_id.startswith(start) for start in TERMS["skip"]["messages"])


FIELD = re.compile(r"""\{(?:(['"])([^'"{}]*)\1(?:![rsa])?(?::[^{}]*)?|[^{}]*)\}""")


def prose(text: str, code: bool = False) -> str:
    """What of a message a reader reads as words: no fenced code, no `code spans`, no link targets; for a code
    literal or a kvlab message (`code`), no `{...}` fields but a quoted header word's text."""
    if code:
        return FIELD.sub(lambda m: m.group(2) or " ", text.replace("{{", "").replace("}}", ""))
    text = re.sub(r"```.*?```", " ", text, flags=re.DOTALL)
    text = re.sub(r"`[^`]*`", " ", text)
    return re.sub(r"\]\([^)]*\)", "]", text)


def _words(text: str) -> str:
    """`text` with every run of white space one space: a word wrapped onto the next line is still that word."""
    return re.sub(r"\s+", " ", text)


def _read(name: str, message) -> tuple[str, str]:
    code = message.context == i18n.CODE or name == "kvlab.po"  # both have {fields}: names, not words
    return _words(prose(message.id, code)), _words(prose(message.string, code))


def _where(name: str, message) -> str:
    return f"{name}: {message.id[:50]!r}"


# -- one word per concept ----------------------------------------------------------------------------------------
def test_every_term_names_its_word_and_compiles():
    assert len(TERMS["terms"]) >= 30
    for name, term in TERMS["terms"].items():
        assert term["en"] and term["pt"], name
        for pattern in [*term["rejected"], term.get("english", ""), term.get("portuguese", "")]:
            re.compile(pattern)
        assert ("english" in term) == ("portuguese" in term), name


def _glossary(path: Path) -> list[tuple[str, str]]:
    """(English, pt-BR) of each row of notebook 00's glossary table (the one under its "English" header)."""
    cells = jupytext.read(path).cells
    table = next(
        c.source for c in cells if c.cell_type == "markdown" and "| pt-BR" in c.source and "|---|---|" in c.source
    )
    rows = [line.strip("| ").split(" | ") for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    return [(row[0], row[1]) for row in rows[1:]]


def _head(word: str) -> str:
    """A term's own word, without its gloss: "live (slots, tokens)" -> "live", "ocupada, ocupado; ..." -> "ocupada"."""
    return re.split(r" \(|[,;]", word, maxsplit=1)[0].strip()


def test_the_glossary_of_notebook_00_holds_every_term_in_both_languages():
    """Every term of the terms file is a row of the glossary: its English word in the English notebook, its one
    Portuguese word beside it, in the English notebook and in the Portuguese one."""
    english = _glossary(i18n.NOTEBOOKS / "00_start_here.py")
    portuguese = _glossary(i18n.NOTEBOOKS / "pt-BR" / "00_start_here.py")
    missing = []
    for key, term in TERMS["terms"].items():
        en, pt = _head(term["en"]).removeprefix("the "), _head(term["pt"]).removeprefix("o ")
        if not any(en.lower() in row_en.lower() and pt.lower() in row_pt.lower() for row_en, row_pt in english):
            missing.append(f"English glossary: {key} ({en!r} beside {pt!r})")
        if not any(pt.lower() in " | ".join(row).lower() for row in portuguese):
            missing.append(f"pt-BR glossary: {key} ({pt!r})")
    assert missing == [], "\n".join(missing)


@every_catalog
def test_no_translation_uses_a_rejected_variant(catalog):
    found = []
    for name, message in messages(catalog):
        _english, translated = _read(name, message)
        for key, term in TERMS["terms"].items():
            for pattern in term["rejected"]:
                if match := re.search(pattern, translated, re.IGNORECASE):
                    found.append(f"{_where(name, message)}: {match.group()!r} where the word is {term['pt']!r} ({key})")
    assert found == [], "\n".join(found)


@every_catalog
def test_a_translation_of_a_concept_uses_its_word(catalog):
    found = []
    for name, message in messages(catalog):
        english, translated = _read(name, message)
        for key, term in TERMS["terms"].items():
            if "english" not in term or not re.search(term["english"], english, re.IGNORECASE):
                continue
            if not re.search(term["portuguese"], translated, re.IGNORECASE):
                found.append(f"{_where(name, message)}: no {term['pt']!r} ({key})")
    assert found == [], "\n".join(found)


ENGLISH_MARKS = (
    re.compile(r"\b\d{1,3}(?:,\d{3}){2,}\b"),  # 1,048,576: English groups (Portuguese: 1.048.576)
    re.compile(r"\b\d{1,3},\d{3} (?:bytes|B)\b"),  # 6,144 bytes: a byte count is a whole number
    # 4,096 posições: a count is whole, so its comma groups thousands (a Portuguese reader reads "four"; issue 42)
    re.compile(r"\b\d{1,3},\d{3}\s+(?:posições|tokens|camadas|passos|requisições|cabeças|números|blocos)\b"),
    re.compile(r"\b\d+\.\d+ ?%"),  # 84.38%: an English decimal point (Portuguese: 84,38%)
)


@every_catalog
def test_portuguese_text_writes_numbers_with_portuguese_marks(catalog):
    found = [
        f"{_where(name, message)}: {match.group()!r}"
        for name, message in messages(catalog)
        for pattern in ENGLISH_MARKS
        if message.context != i18n.CODE
        for match in pattern.finditer(prose(message.string))
    ]
    assert found == [], "\n".join(found)


# -- no English where a reader looks -----------------------------------------------------------------------------
# Words that are English and never Portuguese (so "a", "as", "do", "no", "se", "for" are not here), and English words of
# kvlab's own output. A loanword the Portuguese text keeps (cache, token, prompt, forward, greedy, flush, batch,
# backend, trace) is not here either.
ENGLISH_WORDS = frozenset(
    """the of and is are was were be been with to in on at by per than this that these those from into
    which who what when where while not or but if so its it has have had will would can could should does did
    each every all only same new one two three after before over between more less most also yet still
    layer layers step steps live masked allocated seen held evicted keys values peak whole requests request
    turn turns fresh reused question answer device guess measured none yes noisy faster slower difference
    beyond noise runs run time times share empty saved written loaded done stopped running
    full sliding chunked dynamic static offloaded quantized paged compiled prefetch offload self cross match
    differ""".split()
)  # the second block: kvlab's kinds, roles and moves, printed as recorded where a word was due (issue 42)
ALLOWED = (
    re.compile(r"`[^`]*`"),  # code spans: API names
    re.compile(r"(?<!\w)'[^'\n]*'(?!\w)|\"[^\"\n]*\""),  # quoted: a repr of the model's own text, an API value
    re.compile(r"\S+ (?:is|is not|not in|in|==) \S+(?=:|$)"),  # a Python test shown as text: `a is b:`
    re.compile(r"\bhttps?://\S+"),
    re.compile(r"\b\w+(?:(?:\[[^\]\s]*\])*[._]\w+)+(?:\[[^\]\s]*\])*"),  # identifiers: use_cache, cache.layers[0].keys
    re.compile(r"\b[A-Z][a-z]+[A-Z]\w*\b"),  # CamelCase classes: DynamicCache, SmolLM2
    re.compile(r"(?<![\w-])--\w[\w-]*"),  # command-line options, typed as they stand: --max-new-tokens, --from-json
    re.compile(r"\b(?:None|True|False)\b"),  # Python's constants, printed as values
)


def english_phrases(text: str, model_text: tuple[str, ...] = (), names: tuple[str, ...] = ()) -> list[str]:
    """The lines of `text` that still read as English: those with an English word (`ENGLISH_WORDS`) outside code
    spans, quoted text, identifiers, class names, URLs, `names` (data's own names, such as the workload's request
    ids) and transformers' own source (`inspect.getsource` shown as text). A line holding one of `model_text` (the
    prompts a notebook feeds its model) is the model's own text, English like its prompt, and is not counted."""
    found = []
    for line in text.splitlines():
        if any(prompt in line for prompt in model_text) or _is_transformers_source(line):
            continue
        words = line
        for allowed in ALLOWED:
            words = allowed.sub(" ", words)
        for name in names:
            words = re.sub(rf"(?<!\w){re.escape(name)}(?!\w)", " ", words)
        if any(word.lower() in ENGLISH_WORDS for word in re.findall(r"[^\W\d_]+", words)):
            found.append(line.strip())
    return found


@functools.cache
def _transformers_source() -> str:
    """The source of transformers' top-level and generation modules, where the notebooks quote it from."""
    root = Path(transformers.__file__).parent
    files = [*root.glob("*.py"), *root.glob("generation/**/*.py")]
    return "\n".join(f.read_text(encoding="utf-8") for f in sorted(files))


def _is_transformers_source(line: str) -> bool:
    """A line that is (or ends with, after a "label: ") a line of transformers' source, quoted as it stands."""
    stripped = line.strip()
    tails = [stripped] + [stripped.split(": ", k)[-1] for k in range(1, stripped.count(": ") + 1)]
    return any(len(tail) >= 20 and tail in _transformers_source() for tail in tails)


def model_output_texts(text: str, model_text: tuple[str, ...]) -> str:
    """`text`, or nothing when it is a decoded continuation: an output that starts with one of `model_text` is the
    model's English from its prompt to its last line, blank lines included."""
    return "" if any(text.lstrip().startswith(prompt) for prompt in model_text) else text


def model_prompts(english: Path, constants: bool = True) -> tuple[str, ...]:
    """The prompts `english` feeds its model: the string literals given to a tokenizer (a call whose name ends in
    "tokenizer") or to `encode`, as they start a printed continuation, and (with `constants`) the texts a notebook
    keeps in an upper-case constant (`SHOP = "..."`, `QUESTIONS = [...]`, a dict's values), each line on its own."""
    prompts = []
    for cell in jupytext.read(english).cells:
        if cell.cell_type != "code":
            continue
        tree = ast.parse(literals.MAGIC.sub(r"\1#", cell.source))
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call) and literals.feeds_model(n)):
            prompts += [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        for assign in (n for n in tree.body if constants and isinstance(n, ast.Assign)):
            if all(isinstance(t, ast.Name) and t.id.isupper() for t in assign.targets):
                value = assign.value
                items = value.values if isinstance(value, ast.Dict) else getattr(value, "elts", [value])
                prompts += [
                    line
                    for item in items
                    if isinstance(item, ast.Constant) and isinstance(item.value, str)
                    for line in item.value.splitlines()
                ]
    return tuple(p for p in prompts if len(p.split()) >= 3)


def test_english_phrases_are_found_and_portuguese_ones_are_not():
    english = "no difference beyond noise: static / dynamic = 1.02\nstep 3: 12 of 30 layers"
    portuguese = "mesmos tokens que o padrão: True\na decodificação greedy do DynamicCache usa `use_cache=True`"
    assert english_phrases(english) == english.splitlines()
    assert english_phrases(portuguese) == []
    assert english_phrases("saída: 'The best thing about learning to cook is'") == []  # the model's own text
    assert english_phrases("o cache guarda 46.080 B por token (como em kvlab.watch)") == []
    assert english_phrases("chamada 1: cache.layers[0].keys   cpu   float32  (1, 3, 7, 64)") == []
    assert english_phrases("I like rock music because it is loud", model_text=("I like rock music because",)) == []
    assert english_phrases("yes      req_6: 24 tokens", names=("yes",)) == []  # a request's name
    quoted = "em _valid_auto_compile_criteria: valid_hardware = self.device.type in"  # transformers' own source
    assert english_phrases(quoted) == [] and english_phrases("the source was valid_hardware") != []
    continuation = "A static cache reserves all of its memory before it is needed.\n\nThe cache is"
    assert model_output_texts(continuation, ("A static cache reserves",)) == ""
    assert model_output_texts("the cache: A static cache reserves", ("A static cache reserves",)) != ""


def test_the_prompts_a_notebook_feeds_its_model_are_found():
    assert "I like rock music because" in model_prompts(i18n.NOTEBOOKS / "04_quantized_caches.py")


@every_catalog
def test_translated_labels_and_kvlab_messages_read_portuguese(catalog):
    """Plot titles, axis and widget labels and printed text: the code literals of the notebooks' catalogs and
    every message kvlab draws or prints (figures are images in the notebooks; their words come from these)."""
    found = [
        f"{_where(name, message)}: {phrase!r}"
        for name, message in messages(catalog)
        if message.context == i18n.CODE or name == "kvlab.po"
        for phrase in english_phrases(_read(name, message)[1])
    ]
    assert found == [], "\n".join(found)


def notebook_text(path: Path) -> list[tuple[str, str]]:
    """(where, text) for what a reader of `path` sees besides markdown: what its cells print (stdout) and the
    values they display as text, and the labels of the widgets saved with it. Not a figure's text/plain stand-in
    ("<Figure size ...>", shown as the image), not stderr (library warnings) and not error outputs: the ones the
    notebooks show on purpose are transformers' own exceptions, English by nature."""
    notebook = nbformat.read(path, as_version=4)
    shown = []
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if output.get("name") == "stdout":
                shown.append((f"{path.name} cell {index}", output.get("text", "")))
            elif "text/plain" in data and not {"image/png", "application/vnd.jupyter.widget-view+json"} & set(data):
                shown.append((f"{path.name} cell {index}", data["text/plain"]))
    state = notebook.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    for model in state.get("state", {}).values():
        shown.append((f"{path.name} widget", model.get("state", {}).get("description", "")))
        # a menu's entries: its labels are read, its values are typed (issue 42: "dynamic", "static" in 09 and 10)
        shown += [(f"{path.name} menu", label) for label in model.get("state", {}).get("_options_labels", [])]
    return shown


def test_pt_br_notebooks_print_and_label_in_portuguese():
    found = []
    names = tuple(load_workload().ids)  # the bundled requests' names ("yes", "recipe"): data, printed as names
    for path in PT_NOTEBOOKS:
        english = i18n.NOTEBOOKS / path.with_suffix(".py").name
        prompts, continued = model_prompts(english), model_prompts(english, constants=False)
        found += [
            f"{where}: {phrase!r}"
            for where, text in notebook_text(path)
            for phrase in english_phrases(model_output_texts(text, continued), prompts, names)
        ]
    assert found == [], f"{len(found)} English lines:\n" + "\n".join(found)


# -- whole numbers grouped as a Portuguese reader reads them --------------------------------------------------------
# "3.584 posições", never "3584" (issue 42: "max_cache_len 3584" printed beside prose that says "3.584"). Not a
# value typed as code (`max_cache_len=3584`, a call's argument `StaticCache(1024)`), a quoted text, a name glued to
# letters or marks (`x86_64`, `Llama-2-7b`), a date or a version, and not token ids (a list of several, or a line
# about ids): those are names, not quantities.
UNGROUPED = re.compile(r"(?<![\w.,/=:#'\"\-])(?<!\w\()[1-9]\d{3,}(?![\w.,/'\"\-]|:\d)")
_ID_LIST = re.compile(r"\[\d+(?:, \d+)+\]")
_ABOUT_IDS = re.compile(r"\bids?\b", re.IGNORECASE)


def ungrouped_integers(text: str) -> list[str]:
    """The lines of `text` with a whole number of four or more digits written without its group marks."""
    return [
        line.strip()
        for line in text.splitlines()
        if not _ABOUT_IDS.search(line) and UNGROUPED.search(_ID_LIST.sub(" ", line))
    ]


def test_an_english_thousands_comma_before_a_count_is_found():
    found = [
        m.group() for p in ENGLISH_MARKS for m in p.finditer("calcula 4,096\nposições; 1,5 tokens; 4.096 posições")
    ]
    assert found == ["4,096\nposições"]


def test_ungrouped_integers_are_found_and_names_values_and_ids_are_not():
    found = ["max_cache_len 3584: 160 tokens guardados", "bytes por camada:  [72192]", "deslizantes   4096   8 x 128"]
    assert ungrouped_integers("\n".join(found)) == found
    assert ungrouped_integers("janela 512, 1.048.576 bytes, 84,38%, 2026-12-02, torch 2.13.0, x86_64") == []
    assert ungrouped_integers("max_cache_len=3584 | StaticCache(4096) | 'prompt 1234' | Llama-2-7b | fp8") == []
    assert ungrouped_integers("regerados: [281, 253, 1836]\nids na posição 6: prefixo + pergunta 1812") == []
    assert ungrouped_integers("entre 1024 e 2048 tokens") == ["entre 1024 e 2048 tokens"]


def test_pt_br_notebooks_print_whole_numbers_grouped():
    """Passes once the pt-BR notebooks are executed again from their current scripts (issue 42)."""
    found = [
        f"{where}: {line!r}"
        for path in PT_NOTEBOOKS
        for where, text in notebook_text(path)
        for line in ungrouped_integers(text)
    ]
    assert found == [], f"{len(found)} lines:\n" + "\n".join(found)


def test_kind_words_printed_as_recorded_are_english():
    """kvlab's kinds, roles and moves printed as recorded ("camada 4 sliding", "self camada 0", "prefetch 1 →")."""
    for line in ("camada  4 sliding: vistos 543", "self camada 0: 10 tokens", "prefetch 1 → update 0 → offload 0"):
        assert english_phrases(line) == [line]
    assert english_phrases("compiled roda 1,21x mais rápido que eager (1,10-1,36)") != []
    assert english_phrases("{'match': 20, 'differ': 24, 'new': 19}") == []  # quoted: a dict's keys, API names
    assert english_phrases("compilado vs. eager: 1,21x mais rápido (1,10-1,36)") == []
    assert english_phrases("smollm2 · estático (max_cache_len=64), registro do passado") == []
    assert english_phrases("cache_implementation='static' | offloaded_static: 46 movimentações") == []
