"""Folded stacks as the flame graph script reads them: one prefix tree, flattened in preorder
(children in name order, FlameGraph's), as parallel arrays. A node's subtree is the run of nodes after
it that are deeper, so the script lays out and skips whole subtrees without building objects.

Several values per node (`keys`): the time of each cause class (the page leaves idle waits out or
shows them without another tree), or a diff's base and new. A node under which every stack has one
cause carries it, for the hover; others carry -1. Nodes narrower than `min_share` of the whole are
left out (their time stays in their parent's): invisible at any zoom that shows the root.
"""

from __future__ import annotations

from typing import Iterable

UNIT_NS = 1000  # values are sent in microseconds: a flame graph has no use for nanoseconds, JSON does for size


class _Node:
    __slots__ = ("children", "values", "cause")

    def __init__(self, nkeys: int):
        self.children: dict[str, _Node] = {}
        self.values = [0.0] * nkeys
        self.cause = None  # None: none yet; -1: several


def build_tree(stacks: Iterable[tuple[tuple[str, ...], dict[str, float], str | None]], keys: tuple[str, ...],
               causes: dict[str, str] | None = None, root: str = "all", min_share: float = 1e-6) -> dict:
    """`stacks`: (frames outermost first, {key: ns}, cause or None). `causes`: cause -> class, for the
    colours (its order is the order of `causes` in the result)."""
    cause_names = sorted(causes or {})
    cause_index = {c: i for i, c in enumerate(cause_names)}
    nkeys = len(keys)
    top = _Node(nkeys)
    for frames, values, cause in stacks:
        vals = [values.get(k, 0.0) for k in keys]
        ci = cause_index.get(cause, -1) if cause is not None else -1
        node = top
        for name in (None,) + tuple(frames):
            if name is not None:
                child = node.children.get(name)
                if child is None:
                    child = node.children[name] = _Node(nkeys)
                node = child
            for j, v in enumerate(vals):
                node.values[j] += v
            node.cause = ci if node.cause in (None, ci) else -1
    total = sum(top.values)
    floor = total * min_share
    names: list[str] = []
    name_index: dict[str, int] = {}
    out_name: list[int] = []
    out_depth: list[int] = []
    out_cause: list[int] = []
    out_values: list[list[int]] = [[] for _ in keys]
    stack = [(root, top, 0)]
    while stack:
        name, node, depth = stack.pop()
        i = name_index.get(name)
        if i is None:
            i = name_index[name] = len(names)
            names.append(name)
        out_name.append(i)
        out_depth.append(depth)
        out_cause.append(node.cause if node.cause is not None else -1)
        for j, v in enumerate(node.values):
            out_values[j].append(round(v / UNIT_NS))
        kept = [(n, c) for n, c in node.children.items() if sum(c.values) >= floor and sum(c.values) > 0]
        for n, c in sorted(kept, key=lambda kv: kv[0], reverse=True):
            stack.append((n, c, depth + 1))
    return {"names": names, "name": out_name, "depth": out_depth, "cause": out_cause,
            "values": {k: out_values[j] for j, k in enumerate(keys)}, "causes": cause_names,
            "classes": [(causes or {})[c] for c in cause_names], "unit_ns": UNIT_NS}
