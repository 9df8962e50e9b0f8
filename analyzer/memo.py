"""Derived figures of one model, computed once while the model lives.

A window's parts, its wait splits and its indexes are asked for by many readers: the ranked blockers,
each rule of the advice, the root causes, the flame graph, the per-interval series. Each is a pure
function of the model (a model never changes), so each is kept beside it, keyed by its other
arguments, and dropped with it. What a memoised function returns is shared: readers never change it.
"""

from __future__ import annotations

import functools
import weakref
from typing import Callable, TypeVar

R = TypeVar("R")

_memos: dict[int, dict] = {}  # id(model) -> {(function, arguments): result}


def _key(value):
    """An argument as part of a key: sets by their members, unhashable objects (a cause table) by
    identity (the tables are built once and kept)."""
    if isinstance(value, (set, frozenset)):
        return frozenset(value)
    try:
        hash(value)
    except TypeError:
        return ("id", id(value))
    return value


def per_model(fn: Callable[..., R]) -> Callable[..., R]:
    """Memoise `fn(model, *args, **kwargs)` for as long as `model` lives."""

    @functools.wraps(fn)
    def wrapper(model, *args, **kwargs):
        memo = _memo_of(model)
        key = _memo_key(fn, args, kwargs)
        if key not in memo:
            memo[key] = fn(model, *args, **kwargs)
        return memo[key]

    return wrapper


def known(fn: Callable[..., R], model, value: R, *args) -> None:
    """Keeps `value` as what `fn` (a per_model function) gives for `model` and these arguments, given positionally as
    its callers give them: what is known of a model made from another (a model restricted to some tasks) without
    working it out again."""
    _memo_of(model)[_memo_key(fn, args, {})] = value


def _memo_of(model) -> dict:
    """The results kept for `model`, dropped with it."""
    memo = _memos.get(id(model))
    if memo is None:
        memo = _memos[id(model)] = {}
        weakref.finalize(model, _memos.pop, id(model), None)
    return memo


def memoised(fn: Callable[..., R], model, *args) -> R | None:
    """What `fn` (a per_model function) keeps for `model` and these arguments, given positionally as its
    callers give them; None when it has not been asked yet."""
    memo = _memos.get(id(model))
    return None if memo is None else memo.get(_memo_key(fn, args, {}))


def _memo_key(fn: Callable, args: tuple, kwargs: dict) -> tuple:
    """The key of a call's result among a model's (per_model, memoised)."""
    return fn.__qualname__, tuple(_key(a) for a in args), tuple(sorted((k, _key(v)) for k, v in kwargs.items()))
