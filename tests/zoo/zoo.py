"""The architecture zoo: every model type of the installed transformers built tiny, generating plainly and inside
`kvlab.watch`, with the dynamic and the static cache.

For one model type, `check_type` answers four questions, each against something kvlab did not compute:
- tokens: does the watched generate give the same 8 greedy tokens as plain transformers?
- bytes: does the trace's final total equal this module's own count of every storage the Cache object holds after
  generate, through any attribute, `layers` or not (`held_bytes`, written here without kvlab's storage code)?
- size: does `kvlab size`'s meta-device answer (`kvlab.size.meta.meta_cache_bytes`) equal the live bytes of
  the plain run's cache, in total and per layer as the trace attributes them?
A failure of transformers itself (the tiny config refused, the model not built, plain `generate` raising) is
recorded with transformers' own error and is not kvlab's; anything that goes wrong after plain `generate`
succeeded is kvlab's. `run_zoo` checks many types in forked worker processes, each type in its own process with
a time limit, so one crash or hang does not stop the rest.
"""

from __future__ import annotations

import json
import multiprocessing
import time
import traceback
from pathlib import Path

import torch

from kvlab.atomic import write_text
from kvlab.models.tiny import FIRST_SPECIAL_ID

SEED = 0
PROMPT_TOKENS = 12  # longer than the tiny windows and chunks (8), so sliding and chunked layers evict
NEW_TOKENS = 8
CACHES = ("dynamic", "static")
TYPE_TIMEOUT_S = 180

# The outcome of one type, in the order a run counts them
BUILD_FAILED = "transformers could not build it"  # its own default config fails to build too
SHRINK_FAILED = "kvlab's tiny config refused"  # the default builds, kvlab's shrunk config does not (tiny.py's)
GENERATE_FAILED = "transformers could not generate with it"
NO_CACHE = "no Cache"  # generates, but keeps no transformers Cache (its own state object, or none)
CHECKED = "checked"
KVLAB_FAILED = "kvlab failed"  # plain generate worked, the watched run raised
TIMED_OUT = "timed out"
CRASHED = "crashed"  # the worker process died (a segfault, out of memory)


# -- the independent count -------------------------------------------------------------------------------------
def _tensors(value, seen: set[int]):
    """Every tensor reachable from `value` through dicts, lists, tuples, sets and the attributes of any object (a
    layer, a Cache, a model's own state holder), each container or object walked once; kvlab's own attributes
    (`_kvlab*`, `kvlab_*`), if any are left, and classes (a cache's `layer_class_to_replicate`) are not the model's."""
    if isinstance(value, torch.Tensor):
        yield value
        return
    if isinstance(value, (type, str, bytes, int, float, bool, torch.device, torch.dtype)) or id(value) in seen:
        return
    if isinstance(value, (dict, list, tuple, set, frozenset)):
        seen.add(id(value))
        for item in value.values() if isinstance(value, dict) else value:
            yield from _tensors(item, seen)
    elif hasattr(value, "__dict__"):
        seen.add(id(value))
        for name, item in vars(value).items():
            if not name.startswith(("_kvlab", "kvlab_")):
                yield from _tensors(item, seen)


def _is_counter(tensor: torch.Tensor) -> bool:
    """A 0-dim integer or bool tensor: a layer's position counter (StaticLayer.cumulative_length), not cached data.
    kvlab's trace leaves counters out of a layer's bytes (8 bytes each); so does this count."""
    return tensor.dim() == 0 and not (tensor.is_floating_point() or tensor.is_complex())


def held_bytes(obj) -> int:
    """Bytes of every distinct storage `obj` (a cache layer, or a whole Cache object) keeps through its attributes at
    any depth, each storage counted once (two views of one buffer are one buffer), counters aside. Written here,
    apart from kvlab's storage code, to check it."""
    storages: dict[tuple, int] = {}
    for tensor in _tensors(obj, set()):
        if _is_counter(tensor):
            continue
        storage = tensor.untyped_storage()
        storages[(str(tensor.device), storage.data_ptr())] = storage.nbytes()
    return sum(storages.values())


def cache_layers(cache) -> list[tuple[str, int, object]]:
    """(role, layer index, layer) of every layer of a transformers cache: an encoder-decoder cache's self-attention
    layers, then its cross-attention layers."""
    if hasattr(cache, "self_attention_cache"):
        return [("self", i, layer) for i, layer in enumerate(cache.self_attention_cache.layers)] + [
            ("cross", i, layer) for i, layer in enumerate(cache.cross_attention_cache.layers)
        ]
    return [("self", i, layer) for i, layer in enumerate(cache.layers)]


def live_bytes(cache) -> dict[tuple[str, int], int]:
    """Per (role, layer) of `cache.layers` (a diagnosis when the totals differ)."""
    return {(role, i): held_bytes(layer) for role, i, layer in cache_layers(cache)}


# -- one type ---------------------------------------------------------------------------------------------------
def _error(err: BaseException) -> dict:
    lines = str(err).strip().splitlines()
    return {"exception": type(err).__name__, "message": lines[0][:300] if lines else ""}


def _prompt() -> torch.Tensor:
    # (1, T) below the ids the tiny configs give special tokens
    return torch.randint(3, FIRST_SPECIAL_ID, (1, PROMPT_TOKENS), generator=torch.Generator().manual_seed(SEED))


def _generate(model, cache: str):
    """transformers' greedy generate of exactly NEW_TOKENS tokens, with `cache_implementation` for the static
    cache; returns its output (sequences and past_key_values)."""
    ids = _prompt()
    kwargs = {"cache_implementation": "static"} if cache == "static" else {}
    pad = model.generation_config.pad_token_id
    pad = 0 if pad is None else pad
    if model.config.is_encoder_decoder and model.generation_config.decoder_start_token_id is None:
        kwargs["decoder_start_token_id"] = model.generation_config.bos_token_id or pad  # T5's convention: the pad id
    return model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        do_sample=False,
        num_beams=1,  # some default generation configs ask for beams (FSMT's 5): one sequence, one cache row
        max_new_tokens=NEW_TOKENS,
        min_new_tokens=NEW_TOKENS,
        pad_token_id=pad,
        return_dict_in_generate=True,
        **kwargs,
    )


def _trace_bytes(trace) -> dict[tuple[str, int], int]:
    """The trace's final bytes per (role, layer)."""
    return {(e["role"], e["layer_idx"]): e["bytes_held"] for e in trace.final_layers()}


def _trace_total(trace) -> int:
    """What the trace says the whole cache holds at the end: its layers' bytes (a layer's share of state kept beside
    `cache.layers` included), and the bytes it paired with no layer."""
    return sum(_trace_bytes(trace).values()) + sum(trace.meta.get("bytes_outside_layers", {}).values())


def _meta_bytes(config, cache: str, is_seq2seq: bool) -> dict[tuple[str, int], int]:
    """`kvlab size`'s answer per (role, layer), from the config on the meta device, for the tokens generate ran."""
    from kvlab.size.meta import meta_cache_bytes

    seen = PROMPT_TOKENS + NEW_TOKENS - 1  # the last new token is never fed back
    kwargs: dict = {"prefill": PROMPT_TOKENS, "cache_kind": cache}
    if is_seq2seq:  # the decoder starts from one start token; the encoder read the prompt
        seen, kwargs["prefill"], kwargs["source_tokens"] = NEW_TOKENS, 1, PROMPT_TOKENS
    if cache == "static":  # generate sizes a static cache for every token it feeds: all but the last
        kwargs["max_cache_len"] = seen
    size = meta_cache_bytes(config, seen, **kwargs)
    roles: dict[str, int] = {}
    answer = {}
    for layer in size.per_layer:
        role = "cross" if layer.layer_kind == "cross" else "self"
        answer[(role, roles.get(role, 0))] = layer.bytes
        roles[role] = roles.get(role, 0) + 1
    return answer


def _differences(expected: dict, got: dict) -> dict:
    """{"role/layer": [expected, got]} where the two counts differ. A layer missing on one side holds 0 bytes there:
    a layer that never caches (Nemotron-H's MLP layers, a cross-attention layer with no image) has no events."""
    return {
        f"{role}/{i}": [expected.get((role, i), 0), got.get((role, i), 0)]
        for role, i in sorted(expected.keys() | got.keys())
        if expected.get((role, i), 0) != got.get((role, i), 0)
    }


def check_cache(model, cache: str, encoder_decoder: bool) -> dict:
    """One cache implementation of one built model: plain generate, watched generate, the three comparisons."""
    import kvlab
    from kvlab import _compat

    try:
        plain = _generate(model, cache)
    except Exception as err:
        return {"status": GENERATE_FAILED, **_error(err)}
    plain_cache = plain.past_key_values
    if not isinstance(plain_cache, _compat.Cache) or not held_bytes(plain_cache):
        return _check_no_cache(model, cache, plain)
    result: dict = {"status": CHECKED, "cache_class": type(plain_cache).__name__}
    live = live_bytes(plain_cache)
    result["live_bytes"] = held_bytes(plain_cache)  # the whole object: `layers` and whatever else it keeps
    try:
        with kvlab.watch(model) as watch:
            watched = _generate(model, cache)
        trace = watch.trace
    except Exception as err:
        return {**result, "status": KVLAB_FAILED, "stage": "watch", **_error(err), "where": traceback.format_exc()}
    result["tokens_identical"] = torch.equal(plain.sequences, watched.sequences)
    if not result["tokens_identical"]:
        result["tokens"] = [plain.sequences[0, -NEW_TOKENS:].tolist(), watched.sequences[0, -NEW_TOKENS:].tolist()]
    held = live_bytes(watched.past_key_values)
    traced = _trace_bytes(trace)
    result["trace_bytes"] = _trace_total(trace)
    result["held_bytes"] = held_bytes(watched.past_key_values)
    result["bytes_exact"] = result["trace_bytes"] == result["held_bytes"] == result["live_bytes"]
    if not result["bytes_exact"]:
        result["bytes_differ"] = {
            "totals": {k: result[k] for k in ("live_bytes", "held_bytes", "trace_bytes")},
            "trace_vs_layers": _differences(held, traced),
            "held_vs_plain": _differences(live, held),
        }
    try:
        predicted = _meta_bytes(model.config, cache, encoder_decoder)
    except Exception as err:
        result["size_exact"] = False
        result["size_error"] = {**_error(err), "where": traceback.format_exc(limit=-3)}
        return result
    result["size_bytes"] = sum(predicted.values())
    result["size_exact"] = result["size_bytes"] == result["live_bytes"] and not _differences(traced, predicted)
    if not result["size_exact"]:
        result["size_differ"] = {
            "totals": [result["live_bytes"], result["size_bytes"]],
            **_differences(traced, predicted),
        }
    return result


def _check_no_cache(model, cache: str, plain) -> dict:
    """A model that keeps its own past (or none), not a transformers Cache: the watch must not change its tokens,
    and must say it saw no cache (`watch.meta["no_cache"]`)."""
    import kvlab

    result: dict = {"status": NO_CACHE, "state": type(plain.past_key_values).__name__}
    try:
        with kvlab.watch(model) as watch:
            watched = _generate(model, cache)
    except Exception as err:
        return {**result, "status": KVLAB_FAILED, "stage": "watch", **_error(err), "where": traceback.format_exc()}
    result["tokens_identical"] = torch.equal(plain.sequences, watched.sequences)
    result["watch_says_no_cache"] = getattr(watch, "meta", {}).get("no_cache") is True
    return result


def check_type(model_type: str) -> dict:
    """Build `model_type` tiny (seeded) and check each cache implementation; never raises."""
    from kvlab.models.tiny import tiny_model

    started = time.perf_counter()
    result: dict = {"model_type": model_type}
    try:
        model = tiny_model(model_type, seed=SEED)
    except Exception as err:
        status = SHRINK_FAILED if _default_builds(model_type) else BUILD_FAILED
        return {**result, "status": status, **_error(err), "seconds": time.perf_counter() - started}
    result["model_class"] = type(model).__name__
    result["caches"] = {cache: check_cache(model, cache, model.config.is_encoder_decoder) for cache in CACHES}
    result["status"] = _overall(result["caches"])
    if result["status"] in (GENERATE_FAILED, KVLAB_FAILED):
        first = next(c for c in result["caches"].values() if c["status"] == result["status"])
        result |= {"exception": first["exception"], "message": first["message"]}
    result["seconds"] = time.perf_counter() - started
    return result


def _default_builds(model_type: str) -> bool:
    """Whether transformers builds `model_type` from its own full-size default config (on the meta device: no
    memory): when it does, a failure to build it tiny is kvlab's shrinking, not transformers'."""
    import transformers

    from kvlab.models.tiny import is_seq2seq_type

    auto = transformers.AutoModelForSeq2SeqLM if is_seq2seq_type(model_type) else transformers.AutoModelForCausalLM
    try:
        with torch.device("meta"):
            auto.from_config(transformers.AutoConfig.for_model(model_type))
    except Exception:
        return False
    return True


def _overall(caches: dict) -> str:
    """A type's status: the dynamic cache's, unless the static one alone failed in kvlab."""
    statuses = [c["status"] for c in caches.values()]
    if KVLAB_FAILED in statuses:
        return KVLAB_FAILED
    return statuses[0]


# -- many types -------------------------------------------------------------------------------------------------
def _child(model_type: str, conn) -> None:
    try:
        torch.set_num_threads(1)
        result = check_type(model_type)
    except BaseException as err:  # anything check_type let through: reported, never lost
        result = {"model_type": model_type, "status": CRASHED, **_error(err)}
    conn.send(result)
    conn.close()


def run_zoo(model_types: list[str], jobs: int = 2, timeout_s: float = TYPE_TIMEOUT_S, progress=None) -> list[dict]:
    """`check_type` for each type, each in a forked process of its own, `jobs` at a time; a type that outlives
    `timeout_s` is stopped and recorded as timed out. `progress(line)`, when given, hears of each type done.
    Results in the order of `model_types`."""
    import kvlab.watcher  # noqa: F401 (imported once here, not again in every forked worker)
    from kvlab.models.tiny import tiny_model

    tiny_model("tiny-llama")  # transformers' model and generate machinery, imported before the forks
    context = multiprocessing.get_context("fork")
    pending = list(model_types)
    running: dict[str, tuple] = {}  # type -> (process, connection, start)
    results: dict[str, dict] = {}
    while pending or running:
        while pending and len(running) < jobs:
            model_type = pending.pop(0)
            receive, send = context.Pipe(duplex=False)
            process = context.Process(target=_child, args=(model_type, send), daemon=True)
            process.start()
            send.close()
            running[model_type] = (process, receive, time.perf_counter())
        multiprocessing.connection.wait([conn for _, conn, _ in running.values()], timeout=1.0)
        for model_type, (process, conn, start) in list(running.items()):
            if conn.poll():
                try:
                    results[model_type] = conn.recv()
                except EOFError:
                    results[model_type] = {"model_type": model_type, "status": CRASHED, "exitcode": process.exitcode}
            elif not process.is_alive():
                results[model_type] = {"model_type": model_type, "status": CRASHED, "exitcode": process.exitcode}
            elif time.perf_counter() - start > timeout_s:
                process.kill()
                results[model_type] = {"model_type": model_type, "status": TIMED_OUT, "seconds": timeout_s}
            else:
                continue
            process.join()
            conn.close()
            del running[model_type]
            if progress is not None:
                progress(f"{len(results)}/{len(model_types)} {model_type}: {results[model_type]['status']}")
    return [results[t] for t in model_types]


def _ran(results: list[dict], cache: str) -> list[dict]:
    """The results of `cache` for the types whose plain generate ran with it (a Cache or not)."""
    return [
        r["caches"][cache]
        for r in results
        if "caches" in r and r["caches"][cache]["status"] in (CHECKED, NO_CACHE, KVLAB_FAILED)
    ]


def counts(results: list[dict]) -> dict:
    """What the run prints: types, built, generate, with and without a Cache; per cache implementation the runs
    whose tokens were identical under the watch, whose trace bytes and whose `kvlab size` were exact; and the
    failures by whose they are."""
    built = [r for r in results if "caches" in r]
    with_cache = [r for r in built if r["status"] in (CHECKED, KVLAB_FAILED)]
    out = {
        "types": len(results),
        "built": len(built),
        "generate": sum(r["status"] != GENERATE_FAILED for r in built),
        "no_cache": sum(r["status"] == NO_CACHE for r in results),
        "with_cache": len(with_cache),
    }
    for cache in CACHES:
        ran = _ran(results, cache)
        checked = [c for c in ran if c["status"] == CHECKED]
        out[f"{cache}_ran"] = len(ran)
        out[f"{cache}_identical"] = sum(c.get("tokens_identical") is True for c in ran)
        out[f"{cache}_with_cache"] = len(checked)
        out[f"{cache}_bytes_exact"] = sum(c.get("bytes_exact") is True for c in checked)
        out[f"{cache}_size_exact"] = sum(c.get("size_exact") is True for c in checked)
    out["transformers_failures"] = sum(r["status"] in (BUILD_FAILED, GENERATE_FAILED) for r in results)
    out["kvlab_failures"] = len(kvlab_failures(results))
    out["size_refused"] = len(refusals(results))
    out["tiny_config_refused"] = sum(r["status"] == SHRINK_FAILED for r in results)
    out["timed_out_or_crashed"] = sum(r["status"] in (TIMED_OUT, CRASHED) for r in results)
    return out


def cache_problems(c: dict) -> dict:
    """What is wrong with one cache's result, as kvlab's failure: {} when nothing is."""
    if c["status"] == KVLAB_FAILED:
        return {"raised": f"{c['exception']}: {c['message']}", "where": c.get("where", "")[-1500:]}
    if c["status"] == NO_CACHE:
        wrong = {"tokens": "differ"} if not c["tokens_identical"] else {}
        return wrong | ({} if c["watch_says_no_cache"] else {"watch": "did not say it saw no Cache"})
    if c["status"] != CHECKED:
        return {}
    wrong = {k: c[k] for k in ("tokens", "bytes_differ", "size_differ", "size_error") if k in c}
    if size_refused(c):  # `kvlab size` said, in one line, that transformers cannot run it on meta: listed apart
        wrong.pop("size_error")
        if c.get("tokens_identical") and c.get("bytes_exact"):
            return {}
    elif all(c.get(k) for k in ("tokens_identical", "bytes_exact", "size_exact")):
        return {}
    return wrong | {k: c[k] for k in ("live_bytes", "trace_bytes", "held_bytes", "size_bytes") if k in c}


# Differences kvlab knows and has not fixed yet, reported on every run (never hidden): (model type, cache) -> what.
KNOWN_SIZE_GAPS = {
    ("t5gemma", "static"): "the first cross-attention layer: live 8 slots (the sliding window), meta 12 (the source)",
}


def known_gap(model_type: str, cache: str, c: dict) -> bool:
    """Only the size differs, and that difference is listed in KNOWN_SIZE_GAPS."""
    listed = (model_type, cache) in KNOWN_SIZE_GAPS
    return listed and bool(c.get("tokens_identical") and c.get("bytes_exact") and c.get("size_differ"))


def size_refused(c: dict) -> bool:
    """`kvlab size` refused this model with its clear error (MetaRunError: transformers cannot run it on the meta
    device, nor on the CPU for a small one): no answer, never a wrong one."""
    return c.get("size_error", {}).get("exception") == "MetaRunError"


def refusals(results: list[dict]) -> list[tuple[str, str, str]]:
    """(model type, cache, message) of every `kvlab size` refusal."""
    return [
        (r["model_type"], cache, c["size_error"]["message"])
        for r in results
        for cache, c in r.get("caches", {}).items()
        if size_refused(c)
    ]


def kvlab_failures(results: list[dict]) -> list[dict]:
    """Every type where kvlab raised, changed a token, counted bytes or size wrong, or kept quiet about a model
    with no Cache: per cache implementation, what differs."""
    failures = []
    for r in results:
        problems = {
            cache: p
            for cache, c in r.get("caches", {}).items()
            if (p := cache_problems(c)) and not known_gap(r["model_type"], cache, c)
        }
        if problems:
            failures.append({"model_type": r["model_type"], "problems": problems})
    return failures


def write_summary(results: list[dict], path: Path, seconds: float) -> Path:
    """The run as JSON: counts, every type's result, kvlab's failures apart."""
    path.parent.mkdir(parents=True, exist_ok=True)
    summary = {
        "seconds": round(seconds, 1),
        "counts": counts(results),
        "kvlab_failures": kvlab_failures(results),
        "size_refused": [{"model_type": t, "cache": c, "message": m} for t, c, m in refusals(results)],
        "transformers_failures": [
            {k: r.get(k) for k in ("model_type", "status", "exception", "message")}
            for r in results
            if r["status"] in (BUILD_FAILED, GENERATE_FAILED, TIMED_OUT, CRASHED)
        ],
        "tiny_config_refused": [
            {k: r.get(k) for k in ("model_type", "exception", "message")}
            for r in results
            if r["status"] == SHRINK_FAILED
        ],
        "results": results,
    }
    return write_text(path, json.dumps(summary, indent=1, default=str))


def report(results: list[dict], seconds: float) -> str:
    """The counts and the failures, as the zoo step prints them."""
    c = counts(results)
    lines = [
        f"architecture zoo: {c['types']} types, {c['built']} built, {c['generate']} generate "
        f"({c['with_cache']} with a transformers Cache, {c['no_cache']} with no Cache) in {seconds:.0f} s; "
        f"{c['transformers_failures']} transformers failures, {c['tiny_config_refused']} tiny configs refused, "
        f"{c['kvlab_failures']} kvlab failures, {c['size_refused']} kvlab size refusals",
        *(
            f"  {cache}: {c[f'{cache}_ran']} ran, tokens identical under kvlab.watch {c[f'{cache}_identical']}; "
            f"with a Cache {c[f'{cache}_with_cache']}: trace bytes exact {c[f'{cache}_bytes_exact']}, "
            f"kvlab size exact {c[f'{cache}_size_exact']}"
            for cache in CACHES
        ),
    ]
    for r in results:
        if r["status"] in (BUILD_FAILED, GENERATE_FAILED, TIMED_OUT, CRASHED):
            lines.append(f"  transformers: {r['model_type']}: {r['status']}: {r.get('exception')}: {r.get('message')}")
    for r in results:
        if r["status"] == SHRINK_FAILED:
            lines.append(f"  tiny config: {r['model_type']}: {r['status']}: {r.get('exception')}: {r.get('message')}")
    for (model_type, cache), what in KNOWN_SIZE_GAPS.items():
        lines.append(f"  known kvlab size gap: {model_type} ({cache}): {what}")
    for model_type, cache, message in refusals(results):
        lines.append(f"  kvlab size refused: {model_type} ({cache}): {message[:300]}")
    for failure in kvlab_failures(results):
        brief = {cache: {k: v for k, v in p.items() if k != "where"} for cache, p in failure["problems"].items()}
        lines.append(f"  KVLAB: {failure['model_type']}: {json.dumps(brief, default=str)[:600]}")
    return "\n".join(lines)
