"""The simulated vendor's node pool: nodes with slots, image caches, shared pulls, and free-slot lookup.

Placement prefers a free node that already has (or is pulling) the sandbox's image, then a warm node,
then any free node, lowest node id first. Lowest-first packs work onto few nodes so that idle nodes can
scale down. Lookups are heaps with lazy deletion: O(log n) per placement.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ANY = ""  # heap key: every free node
WARM = "*"  # heap key: free nodes that hold every image


@dataclass(slots=True, eq=False)
class Pull:
    """One image pull on one node; every sandbox placed there meanwhile waits for it."""

    image: str
    ends_at: float
    fails: bool
    waiters: list[Any] = field(default_factory=list)
    timer: Any = None
    missing: set[str] = field(default_factory=set)  # pulls by size: layers still moving to the node


@dataclass(slots=True, eq=False)
class Node:
    id: int
    slots: float
    warm: bool  # holds every image (an initial, pre-warmed node)
    born_at: float
    used: int = 0
    images: set[str] = field(default_factory=set)
    pulls: dict[str, Pull] = field(default_factory=dict)
    # pulls by size (`image_pulls.py`): the layers cached here (MB, least recently used first), what placed sandboxes use
    layers: dict[str, float] = field(default_factory=dict)
    in_use: dict[str, int] = field(default_factory=dict)  # image -> sandboxes placed here with it
    alive: bool = True
    idle_since: float | None = None
    idle_timer: Any = None

    def has_image(self, image: str) -> bool:
        return self.warm or image in self.images

    @property
    def free(self) -> bool:
        return self.alive and self.used < self.slots


class NodePool:
    """Nodes, their free slots and the heaps that find one quickly."""

    def __init__(self, slots_per_node: float) -> None:
        self.slots_per_node = slots_per_node
        self.nodes: dict[int, Node] = {}
        self.free_slots = 0.0
        self.booting = 0  # nodes requested from the autoscaler, not yet arrived
        self._next_id = 0
        self._heaps: dict[str, list[int]] = {}
        self._in_heap: set[tuple[str, int]] = set()

    def __len__(self) -> int:
        return len(self.nodes)

    def add(self, *, warm: bool, now: float) -> Node:
        node = Node(id=self._next_id, slots=self.slots_per_node, warm=warm, born_at=now)
        self._next_id += 1
        self.nodes[node.id] = node
        self.free_slots += node.slots
        self._index(node)
        return node

    def remove(self, node: Node) -> None:
        node.alive = False
        self.free_slots -= node.slots - node.used
        del self.nodes[node.id]

    def _keys(self, node: Node) -> list[str]:
        keys = [ANY]
        if node.warm:
            keys.append(WARM)
        keys.extend(node.images)
        keys.extend(node.pulls)
        return keys

    def _push(self, key: str, node: Node) -> None:
        marker = (key, node.id)
        if marker not in self._in_heap:
            self._in_heap.add(marker)
            heapq.heappush(self._heaps.setdefault(key, []), node.id)

    def _index(self, node: Node) -> None:
        if node.free:
            for key in self._keys(node):
                self._push(key, node)

    def index_image(self, node: Node, image: str) -> None:
        """The node gained (or started pulling) an image: make it findable by that image."""
        if node.free:
            self._push(image, node)

    def _peek(self, key: str, valid: Callable[[Node], bool]) -> Node | None:
        heap = self._heaps.get(key)
        while heap:
            node = self.nodes.get(heap[0])
            if node is not None and node.free and valid(node):
                return node
            self._in_heap.discard((key, heapq.heappop(heap)))
        return None

    def pick(self, image: str) -> Node | None:
        """The free node to place a sandbox of `image` on, or None when the pool is full."""
        return (
            self._peek(image, lambda n: image in n.images or image in n.pulls)
            or self._peek(WARM, lambda n: True)
            or self._peek(ANY, lambda n: True)
        )

    def take_slot(self, node: Node) -> None:
        node.used += 1
        self.free_slots -= 1
        node.idle_since = None

    def release_slot(self, node: Node) -> None:
        """Give a slot back; returns nothing, the caller decides about idle scale-down."""
        node.used -= 1
        if node.alive:
            self.free_slots += 1
            self._index(node)
