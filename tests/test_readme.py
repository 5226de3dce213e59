"""README.md runs as written: every shell command and Python block in it, with the numbers it states checked.

A reader copies the README's blocks into a terminal or a notebook; a block that fails there (a name it never
defines, an option a command has stopped taking) is a bug the reader finds first. So each fenced block runs here
unchanged: Python blocks in a fresh interpreter, statement by statement as a notebook or the REPL runs them (a
bare expression shows its value, so a value the README writes beside one can be checked), shell commands in bash
with the venv's `bin/` first on PATH. Numbers the README states that do not depend on the machine (bytes, slots,
token counts, a printed line) are checked in the output; times never are (they are benchmarks).

A block that cannot run here says so in the README itself, just above it: `<!-- readme-test: skip (reason) -->`
(the suite itself, installs, a GPU); it is reported as skipped with that reason. A fenced block of any other
language needs one too, so no block is left out silently. `<!-- readme-test: server (reason) -->` marks commands
that serve until Ctrl-C: each runs until it listens on 127.0.0.1, then is stopped by its pid.

Cost: one interpreter runs every Python block (a fresh namespace per README section, so a block cannot lean on
names an earlier section defined), and each shell command is one process; the README's commands are kept short
(few tokens, SmolLM2) so that the whole file stays cheap. One file, so `--dist loadfile` keeps it in one worker.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MARKER = re.compile(r"<!--\s*readme-test:\s*(?P<mark>skip|server)\s*\((?P<reason>.+)\)\s*-->")
FENCE = re.compile(r"^```(?P<lang>[\w+-]*)\s*$")
HEADING = re.compile(r"^#{1,6}\s+(?P<title>.+?)\s*$")
PYTHON = {"python", "py"}
SHELL = {"bash", "sh", "shell", "console"}
TIMEOUT_S = 600

pytestmark = pytest.mark.real_model


@dataclass(frozen=True)
class Block:
    id: str  # the section's heading, slugged, and the block's number in it: "command-line-1"
    heading: str
    lang: str
    code: str
    line: int  # README line of the opening fence
    mark: tuple[str, str] | None  # its readme-test marker: ("skip" or "server", the reason)

    @property
    def skip(self) -> str | None:
        """Why it does not run here, when its marker says it does not."""
        return self.mark[1] if self.mark and self.mark[0] == "skip" else None

    @property
    def where(self) -> str:
        return f"{self.id} (README.md:{self.line})"


def slug(heading: str) -> str:
    """`Watch code you did not write for kvlab (`kvlab.watch`)` -> `watch-code-you-did-not-write-for-kvlab`."""
    text = unicodedata.normalize("NFKD", re.sub(r"\([^)]*\)", "", heading)).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def readme_blocks(text: str) -> list[Block]:
    """Every fenced block, with its section and the readme-test marker right above it (blank lines between)."""
    blocks: list[Block] = []
    heading, counts, marker = "", {}, None
    fence: tuple[str, int, list[str]] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if fence is not None:
            if line.strip() == "```":
                lang, start, body = fence
                counts[heading] = counts.get(heading, 0) + 1
                blocks.append(
                    Block(f"{slug(heading)}-{counts[heading]}", heading, lang, "\n".join(body), start, marker)
                )
                fence, marker = None, None
            else:
                fence[2].append(line)
            continue
        if found := FENCE.match(line):
            fence = (found["lang"], number, [])
        elif line.lstrip().startswith("<!--") and "readme-test" in line:
            if not (found := MARKER.search(line)):
                raise ValueError(
                    f"README.md:{number}: a readme-test marker reads `<!-- readme-test: skip|server (reason) -->`"
                )
            marker = (found["mark"], found["reason"].strip())
        elif line.strip():
            if marker is not None:
                raise ValueError(f"README.md:{number}: a readme-test marker is not right above a fenced block")
            if found := HEADING.match(line):
                heading = found["title"]
    if fence is not None:
        raise ValueError(f"README.md:{fence[1]}: a fenced block is never closed")
    return blocks


def shell_commands(block: Block) -> list[str]:
    """The command lines of a shell block: comment-only lines dropped, `\\` continuations joined, a console's
    `$ ` prompt removed. A trailing `# comment` stays: bash reads it as the comment it is."""
    commands, pending = [], ""
    for raw in block.code.splitlines():
        line = raw.removeprefix("$ ") if block.lang == "console" else raw
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        commands.append(pending + line)
        pending = ""
    return commands


def said(fragment: str) -> bool:
    """The README still says `fragment` (line breaks inside it read as spaces)."""
    return " ".join(fragment.split()) in " ".join(README.read_text(encoding="utf-8").split())


BLOCKS = readme_blocks(README.read_text(encoding="utf-8"))
ShellCheck = Callable[[subprocess.CompletedProcess, Path], None]
BY_ID = {b.id: b for b in BLOCKS}


def _serves(block: Block) -> bool:
    return block.mark is not None and block.mark[0] == "server"


# -- what each block must show -------------------------------------------------------------------------------------
# Python: statements run in the block's namespace after it ran, each with the README words it checks.
PY_CHECKS: dict[str, list[tuple[str, str]]] = {
    "use-1": [
        (
            "one row per layer (30 for SmolLM2)",
            "assert [e['slots_allocated'] for e in result.trace.final_layers()] == [64] * 30",
        ),
        ("trace schema version 6", "import json; assert json.load(open('run.json'))['kvlab_trace'] == 6"),
        ("a drop-in for transformers' QuantizedCache", "assert cache.trace.updates"),
    ],
    "write-your-own-strategy-2": [
        ("570: 30 layers x (35 tokens seen - 16 kept)", "assert watch.trace.summary()['tokens_evicted'] == 570"),
        (
            "12 slots stored per layer: 4 first + 8 last",
            "assert result.trace.final_layers()[0]['slots_allocated'] == 12",
        ),
        (
            "an instrumented Cache of KeepEnds layers",
            "assert isinstance(cache, Cache) and cache.trace.meta['strategy']['options'] == {'last': 8}",
        ),
    ],
    "time-measured-like-bytes-1": [
        (
            "scored 210 key slots (over 30 layers) with a DynamicCache",
            "assert steps['DynamicCache'].slots_attended == 210",
        ),
        (
            "and 122,880 with `StaticCache(max_cache_len=4096)`",
            "assert steps['StaticCache(4096)'].slots_attended == 122_880",
        ),
    ],
}
# Python: text the block's output must contain (a value the README writes beside the expression that shows it).
PY_OUTPUT: dict[str, list[str]] = {
    "watch-code-you-did-not-write-for-kvlab-1": ["[None, 0]"],
    "time-measured-like-bytes-1": ["StaticCache(4096)", "DynamicCache"],
}


def _contains(*texts: str) -> ShellCheck:
    def check(done: subprocess.CompletedProcess, cwd: Path) -> None:
        missing = [t for t in texts if t not in done.stdout]
        assert not missing, f"missing from the output: {missing}"

    return check


def _matches(*patterns: str) -> ShellCheck:
    def check(done: subprocess.CompletedProcess, cwd: Path) -> None:
        missing = [p for p in patterns if not re.search(p, done.stdout)]
        assert not missing, f"no match in the output: {missing}"

    return check


def _quanto_run(done: subprocess.CompletedProcess, cwd: Path) -> None:
    run = json.loads(done.stdout)  # --json: one JSON object on stdout, nothing else
    assert run["cache"] == "quantized" and run["options"]["backend"] == "quanto" and run["options"]["nbits"] == 4
    assert 1 <= len(run["generated_token_ids"]) <= 20


def _bench_rows(done: subprocess.CompletedProcess, cwd: Path) -> None:
    result = json.loads((cwd / "out.json").read_text())
    assert [row["label"] for row in result["rows"]] == ["dynamic", "static", "offloaded_static"]


def _overhead(done: subprocess.CompletedProcess, cwd: Path) -> None:
    result = json.loads((cwd / "overhead.json").read_text())
    assert (result["prompt_tokens"], result["new_tokens"], result["threads"]) == (16, 4, 1)
    assert result["same_tokens"] is True


def _every_architecture(done: subprocess.CompletedProcess, cwd: Path) -> None:
    names = json.loads((ROOT / "kvlab" / "data" / "architectures.json").read_text())["models"]
    assert [name for name in names if name not in done.stdout] == []


def _build_status(done: subprocess.CompletedProcess, cwd: Path) -> None:
    """`build` right after `update`, with no translating between (the README's middle step): it writes every
    notebook whose catalog is translated and leaves, exit status 1, exactly those with a paragraph still to
    translate or review (an English notebook edited since its catalog was). In a committed tree: none."""
    from babel.messages.pofile import read_po

    refused = re.findall(r"notebooks/pt-BR/(\w+)\.py: not built", done.stdout)
    for name in refused:
        with (cwd / "notebooks" / "locale" / "pt_BR" / f"{name}.po").open("rb") as handle:
            pending = [m for m in read_po(handle) if m.id and (not m.string or m.fuzzy)]
        assert pending, f"{name}: not built, yet its catalog has nothing to translate or review"
    assert done.returncode == (1 if refused else 0)


JUDGES_ITS_STATUS = {_build_status}  # every other command must exit 0


# Shell: (a fragment naming exactly one command of the block, the README words it checks or None, the check).
SHELL_CHECKS: dict[str, list[tuple[str, str | None, ShellCheck]]] = {
    "command-line-1": [
        (
            "kvlab models list",
            "the bundled models and whether they are prepared",
            _contains("smollm2", "gemma3", "prepared"),
        ),
        ("--backend quanto", "one JSON object on stdout instead of the report", _quanto_run),
        ("--only static", "a short look at dynamic, static and offloaded_static", _bench_rows),
        ("--overhead", "instrumented vs plain, short", _overhead),
    ],
    "how-big-will-the-cache-be-1": [
        ("--list", "architectures from public configs (kvlab/data/architectures.json)", _every_architecture),
        ("llama-2-7b", "dynamic: 2,147,483,648 B (0.5 MiB per token)", _contains("2,147,483,648", "524,288")),
        ("gemma-3-4b", "756 MiB held, 4.15 GiB peak", _matches(r"756(\.0+)? MiB", r"4\.15 GiB")),
        ("--config", "static 3,019,898,880 B for 16,384 slots", _contains("3,019,898,880")),
    ],
    "in-portuguese-notebooks-pt-br-built-from-one-source-1": [
        ("tools.i18n.notebooks build", "writes notebooks/pt-BR/NN_name.py", _build_status),
    ],
}


@pytest.fixture(scope="module")
def environment(tmp_path_factory) -> dict[str, str]:
    """The reader's shell: the venv's commands first. One torch thread (the suite's rule on a shared CPU); English
    messages, which the README quotes; KVLAB_HOME as it is, so the prepared models are found.

    `ninja` stays the one the suite finds: optimum-quanto compiles its C++ extension with the first `ninja` on
    PATH, and the venv's (pip's ninja 1.13) and the system's (1.11) log different command hashes, so each switch
    between them rebuilds the extension, about a minute of CPU, for this file and again for the next quanto test."""
    env = dict(os.environ)
    path = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    ninja = shutil.which("ninja")
    if ninja is not None and shutil.which("ninja", path=path) != ninja:
        pinned = tmp_path_factory.mktemp("ninja")
        (pinned / "ninja").symlink_to(ninja)
        path = f"{pinned}{os.pathsep}{path}"
    return {**env, "PATH": path, "OMP_NUM_THREADS": "1", "KVLAB_LANG": "en"}


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A working copy of what the README's shell commands read and write, so they run from a checkout's root
    without touching this one: kvlab/ (its prompts), tools/ (`python -m tools.i18n.notebooks` finds notebooks/
    beside it), the notebooks' scripts and catalogs (rewritten by `update` and `build`), and .venv pointing at this
    venv."""
    root = tmp_path_factory.mktemp("checkout")
    ignore = shutil.ignore_patterns("__pycache__")
    for package in ("kvlab", "tools"):
        shutil.copytree(ROOT / package, root / package, ignore=ignore)
    shutil.copytree(ROOT / "notebooks" / "locale", root / "notebooks" / "locale", ignore=ignore)
    for folder in ("", "pt-BR"):
        (root / "notebooks" / folder).mkdir(parents=True, exist_ok=True)
        for script in (ROOT / "notebooks" / folder).glob("*.py"):
            shutil.copy2(script, root / "notebooks" / folder / script.name)
    (root / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    return root


@pytest.fixture(scope="module")
def python_results(tmp_path_factory, environment) -> dict[str, dict]:
    """Every runnable Python block, run once, in README order, by this file as a script in a fresh interpreter."""
    work = tmp_path_factory.mktemp("python_blocks")
    runnable = [b for b in BLOCKS if b.lang in PYTHON and b.skip is None]
    plan = [
        {
            "id": b.id,
            "heading": b.heading,
            "line": b.line,
            "code": b.code,
            "checks": [c for _, c in PY_CHECKS.get(b.id, [])],
        }
        for b in runnable
    ]
    (work / "blocks.json").write_text(json.dumps(plan))
    process = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), str(work / "blocks.json"), str(work / "results.json")],
        cwd=work,
        env=environment,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    results = json.loads((work / "results.json").read_text()) if (work / "results.json").exists() else {}
    for block in runnable:  # a crash of the interpreter itself: every block it did not report shows why
        results.setdefault(block.id, {"stdout": "", "error": f"exit status {process.returncode}\n{process.stderr}"})
    return results


def run_python_blocks(plan_path: str, results_path: str) -> None:
    """In the fresh interpreter: each block statement by statement, as a notebook cell runs (a bare expression
    shows its value), in its section's namespace; then its checks. A result is written after every block."""
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]  # the blocks see the cwd, not tests/
    results, namespaces, failed = {}, {}, {}
    for block in json.loads(Path(plan_path).read_text()):
        if block["heading"] in failed:
            results[block["id"]] = {"stdout": "", "error": f"not run: {failed[block['heading']]} failed before it"}
            continue
        namespace = namespaces.setdefault(block["heading"], {"__name__": "__main__"})
        shown, error = io.StringIO(), None
        tree = ast.parse(block["code"])
        ast.increment_lineno(tree, block["line"])  # tracebacks name README lines
        try:
            with contextlib.redirect_stdout(shown):
                for statement in tree.body:
                    exec(compile(ast.Interactive([statement]), str(README), "single"), namespace)
            for check in block["checks"]:
                exec(compile(check, f"<check of {block['id']}: {check}>", "exec"), namespace)
        except BaseException:  # noqa: B036 - a block may raise anything, SystemExit included; it is reported
            error = traceback.format_exc()
            failed[block["heading"]] = block["id"]
        results[block["id"]] = {"stdout": shown.getvalue(), "error": error}
        Path(results_path).write_text(json.dumps(results))


def _run_shell(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


URL = re.compile(r"http://127\.0\.0\.1:(?P<port>\d+)/\?token=[0-9a-f]{32}")


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def _serve_briefly(command: str, cwd: Path, env: dict[str, str], log: Path) -> str:
    """Start a server as written, wait until it has printed its URL (127.0.0.1, a token) and that port accepts a
    connection, then stop it by its pid with the SIGTERM it handles (it stops its own children). BROWSER=true:
    Python's webbrowser runs `true` instead of opening one. Returns what it printed."""
    with log.open("w") as out:
        process = subprocess.Popen(
            ["bash", "-c", f"exec {command}"],
            cwd=cwd,
            env={**env, "BROWSER": "true"},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group, so a server that ignores SIGTERM can still be stopped
        )
    try:
        deadline, served = time.monotonic() + 120, False
        while not served and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.5)
            found = URL.search(log.read_text())
            served = found is not None and _listening(int(found["port"]))
        assert served, f"`{command}` did not serve on 127.0.0.1 (exit status {process.poll()}):\n{log.read_text()}"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 0, f"`{command}` stopped with exit status {process.returncode}:\n{log.read_text()}"
    return log.read_text()


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.splitlines()[-lines:])


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang in PYTHON], ids=lambda b: b.id)
def test_python_block_runs_as_written(block, python_results):
    if block.skip:
        pytest.skip(block.skip)
    result = python_results[block.id]
    assert result["error"] is None, f"{block.where} failed:\n{result['error']}"
    missing = [text for text in PY_OUTPUT.get(block.id, []) if text not in result["stdout"]]
    assert not missing, f"{block.where} did not show {missing}; it showed:\n{_tail(result['stdout'], 40)}"


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang in SHELL and not _serves(b)], ids=lambda b: b.id)
def test_shell_block_runs_as_written(block, checkout, environment):
    if block.skip:
        pytest.skip(block.skip)
    for command in shell_commands(block):
        done = _run_shell(command, checkout, environment)
        checks = [check for fragment, _, check in SHELL_CHECKS.get(block.id, []) if fragment in command]
        if not JUDGES_ITS_STATUS & set(checks):
            assert done.returncode == 0, (
                f"{block.where}: `{command}` exited {done.returncode}\n{_tail(done.stdout)}\n{_tail(done.stderr)}"
            )
        for check in checks:
            try:
                check(done, checkout)
            except (AssertionError, ValueError, KeyError, OSError) as err:
                pytest.fail(f"{block.where}: `{command}`: {err!r}\n{_tail(done.stdout, 30)}\n{_tail(done.stderr)}")


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang in SHELL and _serves(b)], ids=lambda b: b.id)
def test_server_block_serves_on_localhost_until_stopped(block, checkout, environment, tmp_path):
    assert said("Voila on 127.0.0.1, the token in the URL; Ctrl-C stops it")
    for number, command in enumerate(shell_commands(block)):
        _serve_briefly(command, checkout, environment, tmp_path / f"server{number}.log")


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang not in PYTHON | SHELL], ids=lambda b: b.id)
def test_any_other_block_says_why_it_does_not_run(block):
    assert block.skip, f"{block.where}: a ```{block.lang or '(no language)'} block: tag it bash or python, or mark it"
    pytest.skip(block.skip)


def test_every_check_names_a_block_a_command_and_what_the_readme_says():
    """A check whose block was renamed, whose command changed, or whose README words went would pass vacuously."""
    python_ids = {b.id for b in BLOCKS if b.lang in PYTHON and b.skip is None}
    assert set(PY_CHECKS) | set(PY_OUTPUT) <= python_ids
    for block_id, checks in PY_CHECKS.items():
        assert [words for words, _ in checks if not said(words)] == [], block_id
    for block_id, outputs in PY_OUTPUT.items():
        assert [text for text in outputs if text not in BY_ID[block_id].code + README.read_text()] == [], block_id
    for block_id, checks in SHELL_CHECKS.items():
        block = BY_ID[block_id]
        assert block.lang in SHELL and block.skip is None, block_id
        for fragment, words, _ in checks:
            assert sum(fragment in command for command in shell_commands(block)) == 1, (block_id, fragment)
            assert words is None or said(words), (block_id, words)


def test_skips_are_few_and_each_gives_its_reason():
    skipped = [b for b in BLOCKS if b.skip]
    assert all(len(b.skip) > 10 for b in skipped)
    assert len([b for b in BLOCKS if not b.skip]) >= 6  # the README's runnable blocks did not all get marked away


def test_make_test_is_the_test_command():
    """`make test` is what the README gives to run the suite, in English and in Portuguese."""
    setup = [b for b in BLOCKS if b.lang in SHELL and all(c.startswith("make ") for c in shell_commands(b))]
    assert len(setup) == 2 and all(any(c.startswith("make test") for c in shell_commands(b)) for b in setup)
    readme = README.read_text(encoding="utf-8")
    assert "`make test` first runs" in readme[readme.index("## Tests and layout") :]


def test_the_serving_sections_size_command_runs(checkout, environment):
    """An inline command a user reported failing (`--page-size` without `--model`/`--tokens`): it runs as written."""
    (command,) = re.findall(r"`(kvlab size [^`]*--page-size [^`]*)`", README.read_text(encoding="utf-8"))
    done = _run_shell(command, checkout, environment)
    assert done.returncode == 0, done.stderr
    assert re.search(r"^paged \(page_size 16\)", done.stdout, re.MULTILINE), done.stdout


if __name__ == "__main__":  # the fresh interpreter `python_results` starts
    run_python_blocks(sys.argv[1], sys.argv[2])
