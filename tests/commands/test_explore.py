"""`kvlab explore`: refuses bad input in one line, serves Voila on 127.0.0.1 with a token, prints the URL."""

from __future__ import annotations

import socket

import nbformat
import pytest
from nbclient import NotebookClient

from kvlab.cli import main
from kvlab.commands import explore


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "gpt5"], "unknown model 'gpt5'; valid: smollm2, gemma3, tiny-llama, tiny-gemma3"),
        (["--port", "70000"], "--port must be between 1 and 65535"),
        (["--lang", "fr"], "unknown --lang 'fr'; valid: en, pt-BR"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, args, message):
    assert main(["explore", "--no-browser", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_serves_voila_on_localhost_with_a_token_and_prints_the_url(monkeypatch, capsys):
    started = {}

    class FakeVoila:
        def __init__(self, command, cwd, env):
            started.update(command=command, notebook=nbformat.read(command[3], as_version=4))

        def wait(self):
            return 0

    monkeypatch.setattr(explore.subprocess, "Popen", FakeVoila)
    previous = explore.signal.getsignal(explore.signal.SIGTERM)
    assert main(["explore", "--port", "18999", "--no-browser", "--token", "secret", "--model", "tiny-llama"]) == 0
    assert "http://127.0.0.1:18999/?token=secret" in capsys.readouterr().out
    command = started["command"]
    assert command[1:3] == ["-m", "voila"] and "--Voila.ip=127.0.0.1" in command and "--no-browser" in command
    assert "--Voila.port_retries=0" in command and "--Voila.token=secret" in command and "--port=18999" in command
    assert "explore(model_name='tiny-llama', preload=True, lang=None)" in started["notebook"].cells[1].source
    assert explore.signal.getsignal(explore.signal.SIGTERM) is previous  # the handler is restored


class _Serving:
    """A server process that is running until `exit_after` polls, then exited."""

    def __init__(self, exit_after: int = 10**9):
        self.polls, self.exit_after = 0, exit_after

    def poll(self):
        self.polls += 1
        return 0 if self.polls > self.exit_after else None


def test_the_browser_opens_once_the_port_answers_and_never_for_a_server_that_exited(monkeypatch):
    import webbrowser

    opened = []
    monkeypatch.setattr(webbrowser, "open", lambda url: opened.append(url) or True)
    with socket.socket() as server:  # a port that answers: bound and listening on 127.0.0.1
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert explore.open_when_served(f"http://127.0.0.1:{port}/", port, _Serving())
    assert opened == [f"http://127.0.0.1:{port}/"]
    assert not explore.open_when_served("http://127.0.0.1:9/", explore.free_port(), _Serving(exit_after=2))
    assert opened == [f"http://127.0.0.1:{port}/"]  # nothing more: the server exited before it answered


def test_lang_reaches_the_served_notebook(monkeypatch, capsys):
    import kvlab

    served = {}

    def popen(command, cwd, env):  # the notebook lives in a temporary directory: read it while it exists
        served["notebook"] = nbformat.read(command[3], as_version=4)
        return _Done()

    monkeypatch.setattr(explore.subprocess, "Popen", popen)
    try:
        assert main(["explore", "--no-browser", "--model", "tiny-llama", "--lang", "pt_br"]) == 0
    finally:
        kvlab.set_language(None)
    assert "explore(model_name='tiny-llama', preload=True, lang='pt-BR')" in served["notebook"].cells[1].source


class _Done:
    def wait(self):
        return 0


def test_the_served_notebook_runs_and_displays_the_explorer():
    nb = nbformat.from_dict(explore.explorer_notebook("tiny-llama"))
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    (output,) = nb.cells[1].outputs
    assert "application/vnd.jupyter.widget-view+json" in output["data"]
    assert "VBox" in output["data"]["text/plain"]
