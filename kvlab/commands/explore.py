"""`kvlab explore`: the Cache Explorer as a standalone web app (Voila, 127.0.0.1 only), from a two-cell notebook
written to a temporary directory. Nothing on the way to the first frame imports torch, Voila or nbformat here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import webbrowser
from pathlib import Path

from kvlab.atomic import write_text
from kvlab.commands import UsageError, add_command
from kvlab.extras import require
from kvlab.i18n import LANGUAGES, _, current_language, set_language

NOTEBOOK_NAME = "kvlab_cache_explorer.ipynb"


def add_parser(subparsers) -> None:
    p = add_command(
        subparsers,
        "explore",
        "serve the Cache Explorer in the browser (Voila, 127.0.0.1)",
        "kvlab explore",
        "kvlab explore --model gemma3 --lang pt-BR --no-browser",
    )
    p.add_argument("--port", type=int, default=0, help="port to serve on (default: a free one)")
    p.add_argument("--no-browser", action="store_true", help="print the URL but do not open a browser")
    p.add_argument("--token", help="access token (default: a random one, printed in the URL)")
    p.add_argument("--model", default="smollm2", help="model selected (and loaded in the background) at start")
    p.add_argument("--lang", default=None, help="language of labels and plots: en or pt-BR (default: the locale)")
    p.set_defaults(handler=handle)


def explorer_notebook(model: str, lang: str | None = None) -> dict:
    """The served notebook as nbformat 4.5 JSON (a plain dict: `nbformat.from_dict` makes it a NotebookNode)."""
    sources = ("import kvlab.explorer", f"kvlab.explorer.explore(model_name={model!r}, preload=True, lang={lang!r})")
    return {
        "cells": [
            {
                "cell_type": "code",
                "id": f"kvlab-{n}",
                "metadata": {},
                "execution_count": None,
                "outputs": [],
                "source": s,
            }
            for n, s in enumerate(sources)
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def voila_command(notebook: Path, port: int, token: str) -> list[str]:
    """Voila never opens the browser itself: between taking its port and starting its event loop it would, and a
    SIGTERM in that window (a `kill` right after the URL works) crashes its handler (`'Voila' object has no attribute
    'ioloop'`) and exits 1. kvlab opens it instead, once the port answers (`open_when_served`)."""
    command = [sys.executable, "-m", "voila", str(notebook), f"--port={port}", "--Voila.ip=127.0.0.1"]
    command += ["--Voila.port_retries=0", f"--Voila.token={token}", "--VoilaConfiguration.show_tracebacks=False"]
    return command + ["--no-browser"]


def open_when_served(url: str, port: int, process) -> bool:
    """Open `url` in the user's browser once 127.0.0.1:`port` accepts a connection, asking every 0.2 s; give up
    when the server `process` exits or after 120 s. Returns whether it opened."""
    for _attempt in range(600):
        if process.poll() is not None:
            break
        with socket.socket() as s:
            s.settimeout(1.0)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return bool(webbrowser.open(url))
        time.sleep(0.2)
    return False


def handle(args) -> int:
    from kvlab.explorer.models import model_choices

    if args.model not in model_choices(False):
        raise UsageError(
            _("unknown model {name!r}; valid: {valid}").format(name=args.model, valid=", ".join(model_choices(False)))
        )
    if args.lang is not None:
        try:
            set_language(args.lang)  # an unknown one is refused here, in one line
        except ValueError:
            raise UsageError(
                _("unknown --lang {lang!r}; valid: {valid}").format(lang=args.lang, valid=", ".join(LANGUAGES))
            ) from None
        args.lang = current_language()  # "pt_br" -> "pt-BR"
    if args.port < 0 or args.port > 65535:
        raise UsageError(
            _("--port must be between 1 and 65535 (0 picks a free one); got {port}").format(port=args.port)
        )
    if importlib.util.find_spec("voila") is None:  # found, not imported: Voila's process imports it (seconds)
        require("voila", "explore", "kvlab explore")  # raises the one line that names the extra

    port = args.port or free_port()
    token = args.token or secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="kvlab-explore-") as tmp:
        notebook = Path(tmp) / NOTEBOOK_NAME
        write_text(notebook, json.dumps(explorer_notebook(args.model, args.lang), indent=1))
        url = f"http://127.0.0.1:{port}/?token={token}"
        print(f"kvlab explore: serving the Cache Explorer at {url}", flush=True)
        print("kvlab explore: press Ctrl-C to stop", flush=True)
        process = subprocess.Popen(
            voila_command(notebook, port, token), cwd=tmp, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
        if not args.no_browser:
            threading.Thread(target=open_when_served, args=(url, port, process), daemon=True).start()
        # `kill PID` of this command stops Voila too (and Voila shuts its kernel down cleanly).
        previous = signal.signal(signal.SIGTERM, lambda *_: process.terminate())
        try:
            return process.wait()
        except KeyboardInterrupt:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
            return 0
        finally:
            signal.signal(signal.SIGTERM, previous)
