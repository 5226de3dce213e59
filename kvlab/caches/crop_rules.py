"""Every rule about `cache.crop`: kvlab refuses, before any layer changes, a crop that would leave the cache
inconsistent with the tokens it claims to hold. transformers 5.24 crops by a negative count (`crop(-n)` removes
the last n tokens); 5.25 rolls linear-attention layers back to a recurrent state they recorded. The rules take
numbers only, so this module imports neither torch nor transformers.
"""

from __future__ import annotations

import operator

from kvlab import _compat
from kvlab.errors import KvlabUserError
from kvlab.i18n import N_, _, layer_kind_label
from kvlab.quantized_backends import BACKENDS_BY_NAME

# A sliding or chunked layer as a refusal names it ("sliding layer 3"), one message per kind so that a translation
# can put the kind where its language puts an adjective ("camada deslizante 3").
LAYER_NAMES = {"sliding": N_("sliding layer {layer_idx}"), "chunked": N_("chunked layer {layer_idx}")}
OTHER_LAYER = N_("{layer_kind} layer {layer_idx}")  # a kind kvlab does not name yet: the kind as it is recorded


class CacheCropError(KvlabUserError, ValueError):
    """A crop that would leave the cache inconsistent with the tokens it claims to hold."""


def crop_count(value) -> int:
    """`value` as a plain int if it is an integral scalar (int, numpy integer, 0-d integer tensor), as transformers
    accepts; bools and anything fractional are refused, since a crop by 0.5 or True is a bug, not a count."""
    if isinstance(value, bool):
        raise CacheCropError(
            _("crop takes an integer count of tokens (negative to remove), got {value!r}").format(value=value)
        )
    try:
        return operator.index(value)
    except TypeError:
        raise CacheCropError(
            _("crop takes an integer count of tokens (negative to remove), got {value!r}; e.g. crop(-3)").format(
                value=value
            )
        ) from None


def removal_count(n) -> int:
    """The count for `cache.crop` that removes the last `n` tokens (n >= 1): -n."""
    if not isinstance(n, int) or n < 1:
        raise CacheCropError(_("crop removes the last n tokens: n must be a positive integer; got {n!r}").format(n=n))
    return -n


def check_crop(tokens_to_remove: int, length: int | None) -> None:
    """A crop count is 0 or negative, and removes at most the `length` tokens the cache holds (None: a cache of
    linear-attention states only, with no token count to check against; `check_linear_rollback` applies)."""
    if tokens_to_remove > 0:
        raise CacheCropError(
            _(
                "crop({n}): transformers {version} crops by a negative count; use crop(-n) to remove the last n tokens."
            ).format(n=tokens_to_remove, version=_compat.TRANSFORMERS_VERSION)
        )
    if length is not None and -tokens_to_remove > length:
        raise CacheCropError(
            _(
                "crop({n}) goes past the start: the cache holds {length} tokens, so valid counts are "
                "crop(0) .. crop(-{length})."
            ).format(n=tokens_to_remove, length=length)
        )


def check_dynamic_sliding(
    tokens_to_remove: int, layer_idx: int, layer_kind: str, seen: int, window: int, records_past: bool
) -> None:
    """A DynamicCache sliding/chunked layer that has filled its window without past recording cannot be cropped.

    transformers raises from inside its layer loop, after the layers before it were already cropped; kvlab
    refuses first."""
    if records_past or seen < window:
        return
    layer = _(LAYER_NAMES.get(layer_kind, OTHER_LAYER))
    raise CacheCropError(
        _(
            "crop({n}) refused: {layer} has seen {seen} tokens and keeps only the last {kept}, so the tokens a crop "
            "must bring back are gone. The cache guide's rule: call cache.activate_past_recording() before "
            "generating; sliding and chunked layers then keep their past until a crop restricts them to the window "
            "again."
        ).format(
            n=tokens_to_remove,
            layer=layer.format(layer_kind=layer_kind_label(layer_kind), layer_idx=layer_idx),
            seen=seen,
            kept=window - 1,
        )
    )


def check_static_sliding(tokens_to_remove: int, layer_idx: int, seen: int, window: int) -> None:
    """A StaticCache sliding layer that has wrapped (seen more tokens than its `window` slots) cannot be cropped.

    The evicted tokens are gone and StaticCache cannot record the past, yet transformers' `crop` still runs and
    the next logits are wrong (up to 10.6 apart from a fresh prefill on Gemma 3 at 700 tokens)."""
    if tokens_to_remove == 0 or seen <= window:
        return
    raise CacheCropError(
        _(
            "crop({n}) refused: sliding layer {layer_idx} has seen {seen} tokens but keeps only its window of "
            "{window}, so the tokens a crop must restore are already evicted. A StaticCache cannot record the past; "
            "use a DynamicCache with cache.activate_past_recording() before generating to be able to roll back."
        ).format(n=tokens_to_remove, layer_idx=layer_idx, seen=seen, window=window)
    )


def check_quantized_residual(tokens_to_remove: int, backend: str, residual: int) -> None:
    """A QuantizedCache crops only its full-precision residual (`residual` tokens in its shortest layer); a backend
    that keeps none (fp8, by its row) cannot crop at all. transformers would crop the residual but keep counting the
    tokens, leaving get_seq_length() wrong."""
    if tokens_to_remove == 0:
        return
    keeps_residual = BACKENDS_BY_NAME[backend].keeps_residual
    if not keeps_residual or -tokens_to_remove > residual:
        held = (
            _("only {residual} tokens in its full-precision residual").format(residual=residual)
            if keeps_residual
            else _("no full-precision residual ({backend} quantizes every token)").format(backend=backend)
        )
        raise CacheCropError(
            _(
                "crop({n}) refused: this QuantizedCache ({backend}) holds {held}; the other tokens are already "
                "quantized and cannot be removed without re-quantizing. transformers would crop the residual but "
                "keep counting the tokens, leaving get_seq_length() wrong."
            ).format(n=tokens_to_remove, backend=backend, held=held)
        )


def check_states_to_keep(value, rolls_back: bool) -> None:
    """`activate_past_recording(recurrent_states_to_keep=value)`: a count of states (None: one per decoded token
    only), on a release whose linear-attention layers can keep them (`rolls_back`). transformers would raise a
    TypeError from inside its layer loop, after the layers before it had started recording."""
    if value is None:
        return
    if not rolls_back:
        raise CacheCropError(
            _(
                "activate_past_recording(recurrent_states_to_keep={n}): the linear-attention layers of transformers "
                "{version} keep no recurrent states to roll back (that came with transformers {release}); call "
                "activate_past_recording() without it, and crop only by 0."
            ).format(n=value, version=_compat.TRANSFORMERS_VERSION, release=_compat.ROLLBACK_RELEASE)
        )
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CacheCropError(
            _(
                "activate_past_recording(recurrent_states_to_keep={n!r}): give a count of states, an integer >= 0 "
                "(at least the tokens of the longest forward you will roll back), or leave it out."
            ).format(n=value)
        )


def check_linear_rollback(tokens_to_remove: int, layer_idx: int, records_past: bool, restorable: int | None) -> None:
    """A linear-attention layer can be cropped only while it records the past, and back by at most the `restorable`
    tokens whose recurrent states it kept (None: this release restores none, so only crop(0)). transformers raises
    from inside its layer loop without recording (after the layers before it were cropped), fails part way through
    past the history (IndexError, the token count already moved), and restores a wrong state at the history's
    oldest entry after a forward longer than `recurrent_states_to_keep`."""
    if not records_past:
        raise CacheCropError(
            _(
                "crop({n}) refused: linear-attention layer {layer_idx} does not record its past, so its recurrent "
                "state cannot be rolled back. Call cache.activate_past_recording(recurrent_states_to_keep=N) before "
                "generating, with N at least the tokens of the longest forward you will roll back."
            ).format(n=tokens_to_remove, layer_idx=layer_idx)
        )
    if tokens_to_remove == 0 or (restorable is not None and -tokens_to_remove <= restorable):
        return
    if restorable is None:
        raise CacheCropError(
            _(
                "crop({n}) refused: the linear-attention layers of transformers {version} cannot restore an earlier "
                "recurrent state (that came with transformers {release}); only crop(0) is valid here."
            ).format(n=tokens_to_remove, version=_compat.TRANSFORMERS_VERSION, release=_compat.ROLLBACK_RELEASE)
        )
    valid = _("crop(0) only") if restorable == 0 else _("crop(0) .. crop(-{restorable})").format(restorable=restorable)
    raise CacheCropError(
        _(
            "crop({n}) refused: linear-attention layer {layer_idx} can restore the recurrent state of at most "
            "{restorable} tokens back (those it recorded since recording began or since its last crop), so the valid "
            "counts are {valid}. Record more with cache.activate_past_recording(recurrent_states_to_keep=N), N at "
            "least the tokens of the longest forward you will roll back."
        ).format(n=tokens_to_remove, layer_idx=layer_idx, restorable=restorable, valid=valid)
    )
