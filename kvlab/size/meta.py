"""The KV cache of any model transformers can build, measured by transformers itself on the meta device.

A model built on meta from its full-size config, run on T meta tokens into its own cache, fills that cache with
meta tensors of the true shapes, without memory: layer classes, sliding and chunked caps, MLA's latent, a
hybrid's states are transformers' decisions, not kvlab's rules. A layer's bytes are the distinct storages of the
cached data it keeps, each counted once, as a trace counts them (a sliding view counts its whole concatenation).
`meta_cache_bytes` runs one generation; `layer_facts` fits each layer's growth from three tiny runs, so
`kvlab size` answers any token count, batch and dtype (stored for known architectures by
`python -m tools.architecture_facts`). A model whose forward fails on meta in the requested dtype (MoE
experts' grouped matmul wants bfloat16) runs in bfloat16, its bytes rescaled by element size.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import NamedTuple

from kvlab import _compat
from kvlab.atomic import write_text
from kvlab.cache_kinds import KINDS, STATIC_KINDS
from kvlab.errors import KvlabUserError
from kvlab.i18n import _, number
from kvlab.names import DTYPE_BYTES, dtype_name
from kvlab.paths import kvlab_home
from kvlab.recording.layer_kinds import layer_kinds
from kvlab.size.layers import Growth, LayerFacts, bytes_by_kind, dtype_bytes

META_KINDS = tuple(kind.name for kind in KINDS if kind.cache_class in ("DynamicCache", "StaticCache"))
# A static cache this long allocates a sliding or chunked layer's whole window (no window in use is longer).
WINDOW_PROBE_SLOTS = 2**20
META_FILE = "data/architectures_meta.json"
# A model whose forward needs a real value on meta (`.item()`, as BART's and BERT's do) is run on the CPU when it has
# at most this many parameters (a tiny config, a small model: seconds and a few hundred MB); a bigger one is refused.
CPU_RUN_PARAMETERS = 50_000_000
MEMO_SCHEMA = 3  # raise when what `_measure` fits changes: every remembered measurement is then taken again


class MetaRunError(KvlabUserError, ValueError):
    """transformers could not build or run the model on the meta device, or its cache grows in a way kvlab's
    layer facts do not describe."""


class LayerBytes(NamedTuple):
    layer_class: str
    layer_kind: str  # kvlab's kind ("full", "sliding", ...), "cross" for an encoder-decoder's cross-attention
    bytes: int


@dataclass
class MetaSize:
    cache_kind: str
    tokens: int
    prefill: int
    batch: int
    dtype: str
    run_dtype: str  # the dtype the meta run used (bytes are rescaled from it to `dtype`)
    per_layer: list[LayerBytes]  # after the last step, in update order (self layer i, then cross layer i)
    peak_bytes: int  # the most held after any single layer update, up to `tokens`

    @property
    def bytes(self) -> int:
        return sum(layer.bytes for layer in self.per_layer)

    @property
    def by_layer_kind(self) -> dict[str, int]:
        return bytes_by_kind((layer.layer_kind, layer.bytes) for layer in self.per_layer)


# -- counting what a layer keeps ----------------------------------------------------------------------------------
def layer_storages(layer) -> dict[int, tuple[int, object, int]]:
    """{storage identity: (bytes, dtype, element size)} of each distinct storage of the tensors a trace counts
    (`held_tensors`: integer counters left out), told apart on meta too, where every address is 0."""
    from kvlab.recording.storage import held_tensors  # imports torch: not for a known name's stored facts

    storages = {}
    tensors = held_tensors(layer) if not isinstance(layer, WithOutside) else layer.tensors()
    for tensor in tensors:
        storage = tensor.untyped_storage()
        if storage.nbytes():
            storages[_compat.storage_identity(tensor)] = (storage.nbytes(), tensor.dtype, tensor.element_size())
    return storages


class WithOutside:
    """A cache layer (None where the Cache has no object for that index) with the tensors its Cache keeps for it
    beside `layers` (MiniMax's `linear_cache[i]`), counted as one layer, as a trace counts them."""

    def __init__(self, layer, outside: list, name: str):
        self.layer, self.outside, self.name = layer, outside, name

    def tensors(self):
        from kvlab.recording.storage import held_tensors

        yield from held_tensors(self.layer) if self.layer is not None else ()
        yield from self.outside


def layer_name(layer) -> str:
    """The class a size reports for a layer: its own, or for state kept only beside `layers`, where it is kept."""
    if isinstance(layer, WithOutside):
        return type(layer.layer).__name__ if layer.layer is not None else layer.name
    return type(layer).__name__


def _is_cache(value) -> bool:
    return isinstance(value, _compat.Cache)


# -- building and running on meta ---------------------------------------------------------------------------------
def _build(config, **kwargs):
    """The model of `config`: the auto class for its kind, or, for a sub-config (Emu3's text config, an audio
    model's decoder) that no auto class maps, the generation class whose own config class it is."""
    import transformers
    from transformers.models.auto import modeling_auto

    if getattr(config, "is_encoder_decoder", False):
        return transformers.AutoModelForSeq2SeqLM.from_config(config, **kwargs)
    if type(config) in transformers.AutoModelForCausalLM._model_mapping:
        return transformers.AutoModelForCausalLM.from_config(config, **kwargs)
    names = [  # every class an auto mapping names, causal LMs first
        name
        for mapping in ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", *sorted(vars(modeling_auto)))
        if mapping.endswith("_MAPPING_NAMES") and isinstance(getattr(modeling_auto, mapping), dict)
        for name in getattr(modeling_auto, mapping).values()
        if isinstance(name, str)
    ]
    for name in dict.fromkeys(names):
        model_class = getattr(transformers, name, None)
        if getattr(model_class, "config_class", None) is type(config) and model_class.can_generate():
            return model_class._from_config(config, **kwargs)
    return transformers.AutoModelForCausalLM.from_config(config, **kwargs)  # transformers' own refusal


_MODELS: dict[tuple, object] = {}  # meta models hold no memory; a build is most of a meta run's time
_FACTS: dict[str, tuple[LayerFacts, ...] | None] = {}


def _meta_model(config, dtype, attention: str | None, device: str = "meta"):
    """The model of `config` built on `device` (meta, or the CPU for a small model whose forward reads a value),
    memoised by the config's content."""
    import torch

    key = (_config_key(config), dtype, attention, device)
    if key not in _MODELS:
        kwargs = {"dtype": dtype, **({"attn_implementation": attention} if attention else {})}
        if device != "meta":
            torch.manual_seed(0)
        with torch.device(device):
            model = _build(config, **kwargs)
        if len(_MODELS) >= 8:
            _MODELS.pop(next(iter(_MODELS)))
        _MODELS[key] = model.eval()
    return _MODELS[key]


def _config_key(config) -> str:
    """The content of a config that decides its model (not its name, dtype or the release that wrote it)."""
    data = config.to_dict()
    for key in ("transformers_version", "architectures", "_name_or_path", "dtype", "torch_dtype"):
        data.pop(key, None)
    return json.dumps(data, sort_keys=True, default=str)


class _Run:
    """One model on meta and the generations run on it, in the first dtype and attention that work (`attempt`)."""

    def __init__(self, config, kinds=None):
        self.config = config
        self._kinds_read = list(kinds) if kinds else None  # the layer kinds, when the caller read them already
        self.encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
        self.as_generate = False  # each step's inputs from `prepare_inputs_for_generation`, not the new ids alone

    def attempt(self, dtype: str, work):
        """`work()` with the model in `dtype` (float8 runs as bfloat16), else in bfloat16 (the grouped matmul of MoE
        experts refuses float32 on meta), else with eager attention (sdpa's mask reads a value on some models)."""
        import torch

        wanted = torch.bfloat16 if dtype == "float8" else getattr(torch, dtype)
        attempts = [(wanted, None), (torch.bfloat16, None), (wanted, "eager"), (torch.bfloat16, "eager")]
        errors = []
        for run_dtype, attention in dict.fromkeys(attempts):
            try:
                return self._work_on("meta", run_dtype, attention, work)
            except MetaRunError:
                raise
            except Exception as err:  # transformers' own error is what the user needs to read
                errors.append(f"{type(err).__name__}: {err}")
        first = errors[0].splitlines()[0][:300]
        if self._small():  # a forward that reads a value (BART's `.item()`): the same classes, run for real
            try:
                return self._work_on("cpu", torch.float32, None, work)
            except Exception as err:
                errors.append(f"{type(err).__name__}: {err}")
        raise MetaRunError(
            _(
                "transformers {version} cannot run model_type {model_type!r} on the meta device ({error}), so kvlab "
                "cannot size its cache"
            ).format(version=_compat.TRANSFORMERS_VERSION, model_type=self.config.model_type, error=first)
        )

    def _work_on(self, device: str, run_dtype, attention: str | None, work):
        self.model = _meta_model(self.config, run_dtype, attention, device)
        self.run_dtype, self.device = run_dtype, device
        self.as_generate = self._adds_ids()
        return work()

    def _adds_ids(self) -> bool:
        """Whether `generate` hands the forward more ids than it was given (XLM appends a mask token, and its forward
        caches every id it was handed but the cached ones): then each step is fed as `generate` feeds it."""
        import torch

        ids = torch.zeros(1, 2, dtype=torch.long, device=self.device)  # (B, T)
        try:
            inputs = self.model.prepare_inputs_for_generation(ids, is_first_iteration=True, use_cache=True)
        except Exception:  # a model that needs more to prepare (an encoder's outputs): fed the new ids
            return False
        fed = inputs.get("input_ids") if isinstance(inputs, dict) else None
        return getattr(fed, "ndim", 0) == 2 and fed.shape[-1] > ids.shape[-1]

    def _small(self) -> bool:
        """At most CPU_RUN_PARAMETERS parameters (counted on meta): cheap to build and run on the CPU."""
        import torch

        try:
            model = _meta_model(self.config, torch.bfloat16, None)
        except Exception:
            return False
        return sum(p.numel() for p in model.parameters()) <= CPU_RUN_PARAMETERS

    def builds_own_cache(self) -> bool:
        """The model refuses transformers' caches and builds its own (`generate` hands it none, asked any kind)."""
        supports = getattr(self.model, "_supports_default_dynamic_cache", None)
        return supports is not None and not supports()

    def _config_layers(self) -> int:
        try:
            return len(layer_kinds(self.config))
        except Exception:  # a config transformers derives no layer types from
            return 0

    def _kinds(self, n: int) -> list[str]:
        if self._kinds_read is None or len(self._kinds_read) != n:
            self._kinds_read = _kinds(self.config, n)
        return self._kinds_read

    def _cache(self, cache_kind: str, max_cache_len: int | None, source_tokens: int):
        """The cache `generate` would build (offloading moves bytes, it does not change them); None for a model that
        builds its own in its forward (MiniMax's `MiniMaxCache`, whatever the cache kind asked)."""
        import transformers

        if self.builds_own_cache():
            return None

        def one(length):
            if cache_kind in STATIC_KINDS:
                return transformers.StaticCache(config=self.config, max_cache_len=length)
            return transformers.DynamicCache(config=self.config)

        if self.encoder_decoder:
            return transformers.EncoderDecoderCache(one(max_cache_len), one(source_tokens))
        return one(max_cache_len)

    def layers(self, cache) -> list[tuple[object, str]]:
        """(layer, kvlab kind) in update order: an encoder-decoder's self layer i, then its cross layer i."""
        if not self.encoder_decoder:
            return self._with_outside(cache)
        own = cache.self_attention_cache.layers
        kinds = self._kinds(len(own))
        out = []
        for layer, kind, cross in zip(own, kinds, cache.cross_attention_cache.layers):
            out += [(layer, kind), (cross, "cross")]
        return out

    def _with_outside(self, cache) -> list[tuple[object, str]]:
        """A decoder's layers, each with what its Cache keeps for it beside `layers` (`outside_tensors`' pairing; a
        tensor paired with no layer goes with the last)."""
        from kvlab.recording.storage import outside_names, outside_tensors

        layers: list = list(cache.layers)
        names = outside_names(cache, _is_cache)
        found = outside_tensors(cache, names, max(len(layers), self._config_layers()), _is_cache) if names else []
        if not found:
            return list(zip(layers, self._kinds(len(layers))))
        count = max([len(layers), *(key + 1 for key, _t in found if isinstance(key, int))])
        layers += [None] * (count - len(layers))
        shares: dict[int, list] = {}
        for key, tensors in found:
            shares.setdefault(key if isinstance(key, int) else count - 1, []).extend(tensors)
        where = f"{type(cache).__name__}.{'/'.join(str(k) for k, _t in found if isinstance(k, str)) or 'outside'}"
        units = [WithOutside(layer, shares[i], where) if i in shares else layer for i, layer in enumerate(layers)]
        return list(zip(units, self._kinds(count)))

    def generate(
        self,
        cache_kind: str,
        prefill: int,
        steps: int,
        batch: int,
        max_cache_len: int | None,
        *,
        dtype: str | None,
        source_tokens: int | None = None,
    ) -> tuple[list[tuple[object, str]], list[int], list[int]]:
        """Prefill, then `steps` one-token decode steps. Returns (layers, the cache's total after each layer update,
        each layer's bytes at the end in `dtype`: the run dtype's elements rescaled); with `dtype=None` only the
        layers."""
        import torch

        def scale(layer) -> int:
            elements, other = _split(layer, self.run_dtype)
            return elements * DTYPE_BYTES[dtype] + other

        source_tokens = source_tokens or prefill
        cache = self._cache(cache_kind, max_cache_len, source_tokens)
        layers = self.layers(cache) if cache is not None else []
        held = [scale(layer) if dtype else 0 for layer, _kind in layers]  # a fresh layer may hold counters
        totals: list[int] = []
        if dtype is not None:
            for index, (layer, _kind) in enumerate(layers):
                if not isinstance(layer, WithOutside):
                    _watch_updates(layer, index, held, totals, scale)
        kwarg = _compat.cache_kwarg(self.model)
        with torch.device(self.device), torch.no_grad():
            encoder = None
            if self.encoder_decoder:  # as `generate` does: the encoder once, its own output object to every step
                source = torch.zeros(batch, source_tokens, dtype=torch.long)  # (B, S)
                encoder = self.model.get_encoder()(input_ids=source)
            for step in range(steps + 1):
                ids = torch.zeros(batch, prefill if step == 0 else 1, dtype=torch.long)  # (B, T) ids
                inputs = {kwarg: cache, "use_cache": True}
                if self.encoder_decoder:
                    inputs.update(decoder_input_ids=ids, encoder_outputs=encoder)
                elif self.as_generate:  # the whole sequence so far, as generate hands it over
                    everything = torch.zeros(batch, prefill + step, dtype=torch.long)  # (B, T) ids
                    inputs = self.model.prepare_inputs_for_generation(
                        everything, is_first_iteration=step == 0, **inputs
                    )
                else:
                    inputs["input_ids"] = ids
                output = self.model(**inputs)
                cache = cache if cache is not None else _compat.output_cache(output)  # the model's own, once built
        layers = self.layers(cache)  # what it holds beside `layers` too, as it ends
        final = [scale(layer) for layer, _kind in layers] if dtype is not None else []
        return layers, totals, final


def _watch_updates(layer, index: int, held: list[int], totals: list[int], scale: Callable[[object], int]) -> None:
    """After each call of the layer's update methods (`update`, `update_conv_state`, ...), its bytes and the
    cache's total: instance attributes shadow the class's methods, for this meta cache only."""
    for name in dir(type(layer)):
        method = getattr(layer, name, None)
        if name.startswith("update") and callable(method):
            setattr(layer, name, _recording(method, layer, index, held, totals, scale))


def _recording(method, layer, index: int, held: list[int], totals: list[int], scale: Callable[[object], int]):
    def wrapped(*args, **kwargs):
        result = method(*args, **kwargs)
        held[index] = scale(layer)
        totals.append(sum(held))
        return result

    return wrapped


def _kinds(config, n: int) -> list[str]:
    try:
        return layer_kinds(config, n)
    except Exception:  # a config transformers derives no layer types from: its layers are full
        return ["full"] * n


# -- one generation, measured ---------------------------------------------------------------------------------------
def meta_cache_bytes(
    config,
    tokens: int,
    *,
    prefill: int | None = None,
    cache_kind: str = "dynamic",
    max_cache_len: int | None = None,
    batch: int = 1,
    dtype: str = "float32",
    source_tokens: int | None = None,
) -> MetaSize:
    """The bytes every layer of `cache_kind` holds after a prefill of `prefill` tokens (default: `tokens`) and
    one-token decode steps up to `tokens`, for `batch` sequences in `dtype`, measured on meta."""
    prefill = tokens if prefill is None else prefill
    if cache_kind not in META_KINDS:
        raise ValueError(
            _("unknown cache kind {cache_kind!r} for a meta run; valid: {valid}").format(
                cache_kind=cache_kind, valid=", ".join(META_KINDS)
            )
        )
    dtype_bytes(dtype)
    if not 1 <= prefill <= tokens or batch < 1:
        raise ValueError(
            _(
                "need batch >= 1 and 1 <= prefill <= tokens; got batch={batch!r}, prefill={prefill!r}, "
                "tokens={tokens!r}"
            ).format(batch=batch, prefill=prefill, tokens=tokens)
        )
    static = cache_kind in STATIC_KINDS
    max_cache_len = (max_cache_len or tokens) if static else None
    source_tokens = source_tokens or tokens  # as `cache_size` counts them
    run = _Run(config)
    steps = tokens - prefill

    def work():
        return run.generate(cache_kind, prefill, steps, batch, max_cache_len, dtype=dtype, source_tokens=source_tokens)

    layers, totals, final = run.attempt(dtype, work)
    per_layer = [LayerBytes(layer_name(layer), kind, held) for (layer, kind), held in zip(layers, final)]
    return MetaSize(
        cache_kind=cache_kind,
        tokens=tokens,
        prefill=prefill,
        batch=batch,
        dtype=dtype,
        run_dtype=dtype_name(run.run_dtype),
        per_layer=per_layer,
        peak_bytes=max([sum(final), *totals]),
    )


# -- the facts `kvlab size` computes with --------------------------------------------------------------------------
def _split(layer, run_dtype) -> tuple[int, int]:
    """(elements of the run dtype, bytes of other dtypes) a layer keeps."""
    elements = other = 0
    for nbytes, dtype, itemsize in layer_storages(layer).values():
        if dtype == run_dtype:
            elements += nbytes // itemsize
        else:
            other += nbytes
    return elements, other


def _fit(one: int, two: int) -> Growth:
    """Growth(per_token, per_sequence) from one token of one sequence and two tokens of two sequences."""
    per_token = (two - 2 * one) // 2
    return Growth(per_token, one - per_token)


def _fit_other(one: int, two: int) -> Growth:
    """Growth(per_sequence, fixed) of bytes that do not grow with tokens (counters, a fixed-dtype state)."""
    return Growth(0, two - one, 2 * one - two)


def layer_facts(config, kinds=None) -> tuple[LayerFacts, ...]:
    """Each cache layer's facts in update order (cross layers interleaved, kind "cross"), fitted from three tiny
    meta runs (`_measure`), once per config, transformers and torch: remembered under kvlab's home, so a second run
    skips the meta forwards. `kinds`: the layer kinds when the caller has read them."""
    key = _config_key(config)
    if key not in _FACTS:
        _FACTS[key] = _remembered(key)
    if _FACTS[key] is None:
        run = _Run(config, kinds)
        # bfloat16 first: a state a model keeps in float32 whatever its dtype then shows as such
        _FACTS[key] = run.attempt("bfloat16", lambda: _measure(run))
        _remember(key, _FACTS[key])
    return _FACTS[key]


def _memo_path(key: str) -> Path:
    """Named by the config and every version that decides its facts."""
    import torch

    versions = f"{MEMO_SCHEMA}|{_compat.TRANSFORMERS_VERSION}|{torch.__version__}|"
    digest = hashlib.sha256((versions + key).encode()).hexdigest()[:32]
    return memo_dir() / f"{digest}.json"


def memo_dir() -> Path:
    return kvlab_home(create=False) / "layer-facts"


def _remembered(key: str) -> tuple[LayerFacts, ...] | None:
    """The facts measured for this config before, or None (none kept, or a damaged file: measured again)."""
    try:
        data = json.loads(_memo_path(key).read_text())
        if data.get("config") != key:  # a digest collision or another file under that name
            return None
        return tuple(LayerFacts.from_json(f) for f in data["facts"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _remember(key: str, facts: tuple[LayerFacts, ...]) -> None:
    """A home that cannot be written only costs the next run the measurement."""
    path = _memo_path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps({"config": key, "facts": [f.to_json() for f in facts]}))
    except (OSError, KvlabUserError):
        pass


def _cpu_probe_slots(config) -> int:
    """A static cache longer than any window the config names: on the CPU its slots are real memory."""
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    windows = [getattr(text, name, None) for name in ("sliding_window", "attention_chunk_size", "chunk_size")]
    return 1 + max([w for w in windows if isinstance(w, int)] + [64])


def _measure(run: _Run) -> tuple[LayerFacts, ...]:
    """Three forwards: a DynamicCache after 1 token of 1 sequence and 2 tokens of 2 sequences (what grows per token
    and per sequence), and a StaticCache of 2**20 slots for 2 sequences (what a sliding or chunked layer allocates:
    its window; what a static layer adds, its counter)."""

    def split(cache_kind, n, batch, length=None, source=None):
        layers = run.generate(cache_kind, n, 0, batch, length, dtype=None, source_tokens=source)[0]
        return [(layer_name(layer), kind, layer, *_split(layer, run.run_dtype)) for layer, kind in layers]

    one, two = split("dynamic", 1, 1), split("dynamic", 2, 2)
    probe_slots = WINDOW_PROBE_SLOTS if run.device == "meta" else _cpu_probe_slots(run.config)
    # a model with a cache of its own keeps it whatever kind is asked, and one that transformers cannot run with a
    # StaticCache (XLM) has none: no static layout to probe
    probe: list = [None] * len(one)
    if not run.builds_own_cache():
        try:
            probe = split("static", 1, 2, probe_slots, 3)
        except Exception:
            if run.device == "meta":  # on meta, the next attempt (bfloat16, eager, the CPU) may run it
                raise
    facts = []
    for (name, kind, layer, elements_one, other_one), two_layer, static in zip(one, two, probe):
        elements, dynamic_other = _fit(elements_one, two_layer[3]), _fit_other(other_one, two_layer[4])
        if static is None:
            facts.append(LayerFacts(kind, elements, dynamic_other, dynamic_other))
            continue
        slots = probe_slots if kind != "cross" else 3
        window = None
        if elements.per_token:
            allocated, rest = divmod(static[3] // 2 - elements.per_sequence, elements.per_token)
            window = allocated if allocated < slots else None
            consistent = not rest and allocated <= slots and (kind != "cross" or allocated == slots)
        else:
            consistent = static[3] == 2 * elements.per_sequence
        if not consistent:
            raise MetaRunError(
                _(
                    "the cache layer {name} of model_type {model_type!r} grows in a way kvlab's layer facts do not "
                    "describe ({layer} holds {elements} elements); kvlab.size.meta.meta_cache_bytes measures it run by "
                    "run"
                ).format(name=name, model_type=run.config.model_type, layer=static[0], elements=number(static[3]))
            )
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        shapes = {}
        if elements.per_token and getattr(keys, "ndim", 0) == 4 and getattr(values, "ndim", 0) == 4:
            shapes = {"key_shape": (keys.shape[1], keys.shape[-1]), "value_shape": (values.shape[1], values.shape[-1])}
        # a static layer keeps the dynamic one's per-sequence state and its own counters
        static_other = Growth(0, dynamic_other.per_sequence, static[4] - 2 * dynamic_other.per_sequence)
        facts.append(LayerFacts(kind, elements, dynamic_other, static_other, window=window, **shapes))
    return tuple(facts)


# -- the facts of the known architectures, shipped -----------------------------------------------------------------
def shipped(file: str) -> dict:
    """The "models" of one of the JSON files kvlab ships (`kvlab/data/...`), read without torch."""
    return json.loads(resources.files("kvlab").joinpath(file).read_text())["models"]


@functools.lru_cache(maxsize=1)
def shipped_facts() -> dict[str, tuple[LayerFacts, ...]]:
    """The stored layer facts of every known architecture (written by `write_facts`), read without torch."""
    out = {}
    for name, entry in shipped(META_FILE).items():
        distinct = [LayerFacts.from_json(f) for f in entry["facts"]]
        out[name] = tuple(distinct[i] for i in entry["layers"])
    return out
