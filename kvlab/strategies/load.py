"""A strategy is a transformers cache-layer class of the user's: named by the class itself, or as "FILE.py:ClassName".

A file is imported from its path (importlib, as `python FILE.py` would run it: nothing unpickled, nothing fetched),
and the class is checked before any model loads: a transformers layer class (`CacheLayerMixin`) whose slots kvlab
reads (a `DynamicLayer` or `StaticLayer` subclass), built with no argument or with the options given. Each mistake
is one `StrategyError` line naming what is valid.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import inspect
import sys
from pathlib import Path

from kvlab import _compat
from kvlab.cache_kinds import is_strategy_spec
from kvlab.errors import KvlabUserError
from kvlab.i18n import _
from kvlab.model_facts import ModelFacts


class StrategyError(KvlabUserError, ValueError):
    """A strategy kvlab cannot use: a file or class that does not exist, a class that is not a cache layer, an
    option its constructor does not take, or a layer that misbehaved while kvlab ran it."""


def is_strategy(cache) -> bool:
    """Whether `cache` names a strategy (a class, or "FILE.py:ClassName") rather than a cache kind ("dynamic")."""
    return isinstance(cache, type) or is_strategy_spec(cache)


def strategy_name(cache) -> str:
    """What traces, tables and menus call a strategy: its class name ("KeepEnds"); a cache kind stays itself."""
    if isinstance(cache, type):
        return cache.__name__
    return cache.rpartition(":")[2] if is_strategy(cache) else str(cache)


def load_strategy(cache) -> type:
    """The layer class `cache` names (a class, or "FILE.py:ClassName"), checked (`check_layer_class`)."""
    layer_class = cache if isinstance(cache, type) else _class_from_file(cache)
    check_layer_class(layer_class)
    return layer_class


def check_strategy(cache, options: dict, facts: ModelFacts | None = None) -> tuple[type, dict]:
    """The layer class `cache` names and the options it is built with, checked; with the model's `ModelFacts`, the model
    too: a strategy replaces attention layers, so a model with a linear-attention state (Mamba's) is refused."""
    layer_class = load_strategy(cache)
    given = layer_options(layer_class, {k: v for k, v in options.items() if v is not None})
    if facts is not None and "linear" in facts.layer_kinds:
        raise StrategyError(
            _(
                "{name} replaces attention layers, and this model keeps linear-attention states ({linear} of its "
                "{layers} layers); valid: a model whose layers are all attention"
            ).format(name=layer_class.__name__, linear=facts.layer_kinds.count("linear"), layers=len(facts.layer_kinds))
        )
    return layer_class, given


def check_layer_class(layer_class) -> None:
    """A transformers layer class whose slots kvlab reads: a subclass of `DynamicLayer` or `StaticLayer`."""
    name = getattr(layer_class, "__name__", repr(layer_class))
    if not isinstance(layer_class, type) or not issubclass(layer_class, _compat.CacheLayerMixin):
        raise StrategyError(
            _(
                "{name} is not a transformers cache layer class; a strategy subclasses "
                "transformers.cache_utils.DynamicLayer (or StaticLayer)"
            ).format(name=name)
        )
    if not issubclass(layer_class, (_compat.DynamicLayer, _compat.StaticLayer)):
        raise StrategyError(
            _(
                "kvlab reads the slots of DynamicLayer and StaticLayer subclasses, and {name} subclasses neither; "
                "subclass transformers.cache_utils.DynamicLayer"
            ).format(name=name)
        )


def layer_options(layer_class: type, options: dict) -> dict:
    """`options` if `layer_class(**options)` takes them by name (a layer is built with no argument otherwise)."""
    parameters = inspect.signature(layer_class).parameters
    named = [n for n, p in parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    unknown = sorted(set(options) - set(named))
    if unknown:
        raise StrategyError(
            _("{name} takes no option {unknown}; valid: {valid}").format(
                name=layer_class.__name__, unknown=", ".join(unknown), valid=", ".join(named) or _("none")
            )
        )
    required = [n for n in named if parameters[n].default is inspect.Parameter.empty and n not in options]
    if required:
        raise StrategyError(
            _("{name} needs {required}: transformers builds each layer with no argument, so give them defaults").format(
                name=layer_class.__name__, required=", ".join(required)
            )
        )
    return dict(options)


def layer_factory(layer_class: type, options: dict):
    """What `Cache(layer_class_to_replicate=...)` calls for each layer: the class, or the class with `options`."""
    if not options:
        return layer_class
    return functools.partial(layer_class, **layer_options(layer_class, options))


def strategy_facts(layer_class: type, options: dict) -> dict:
    """What a trace records of a strategy: its class, the file it came from (None for one defined in a notebook's
    kernel) and its options (written as text where JSON has no such value)."""
    try:
        file = inspect.getsourcefile(layer_class)
    except TypeError:
        file = None
    plain = (int, float, str, bool, type(None))
    return {
        "name": layer_class.__name__,
        "file": file if file and Path(file).is_file() else None,
        "options": {k: v if isinstance(v, plain) else repr(v) for k, v in options.items()},
    }


def _class_from_file(spec: str) -> type:
    path, _sep, name = spec.rpartition(":")
    file = Path(path).expanduser()
    if not file.is_file():
        raise StrategyError(_("strategy file {file} does not exist").format(file=file))
    module = _import_file(file.resolve(), file.stat().st_mtime_ns)
    found = getattr(module, name, None) if name.isidentifier() else None
    if found is None:
        layers = [n for n, v in vars(module).items() if _is_layer_class(v) and v.__module__ == module.__name__]
        raise StrategyError(
            _("{file} has no class {name!r}; its layer classes: {valid}").format(
                file=file, name=name, valid=", ".join(layers) or _("none")
            )
        )
    return found


def _is_layer_class(value) -> bool:
    return isinstance(value, type) and issubclass(value, _compat.CacheLayerMixin)


@functools.cache
def _import_file(file: Path, modified_ns: int):
    """The module of `file`, imported once per version of the file (an edit imports it again)."""
    digest = hashlib.sha256(f"{file}:{modified_ns}".encode()).hexdigest()[:12]
    module_name = f"kvlab_strategy_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise StrategyError(_("strategy file {file} is not a Python file").format(file=file))
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look a class's module up by name
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # the user's file: its own error, in one line
        del sys.modules[module_name]
        raise StrategyError(
            _("strategy file {file} failed to import: {error}").format(file=file, error=f"{type(err).__name__}: {err}")
        ) from None
    return module
