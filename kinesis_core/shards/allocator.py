"""Balanced explicit hash keys: spread N entities evenly over any power-of-two split of shards.

MD5 of a few partition keys can put most of them on one shard. When you control the keys, give
each entity (an account, a device) an explicit hash key from :class:`BalancedKeyAllocator`.

The key space [0, 2**bits) is a binary tree of halvings: the root's key is the midpoint 2**(bits-1),
its children's keys are the midpoints of the two halves, and so on. The next key is the first
free key on a walk from the root that takes the node's own key if it is free, else goes to the
child subtree holding fewer keys (the left one on a tie). From an empty tree this fills the tree
level by level (64, 32, 96, 16, 80, 48, 112 for bits=7), and for every k the 2**k equal
segments of the key space then hold counts that differ by at most one: splitting the stream
into 2, 4, 8, ... uniform shards keeps the entities balanced. Existing keys (any values) can be
added first; new keys then go where the tree is light until it is balanced again.

Sparse existing keys are kept in unsplit buckets and pushed one level down only when a walk
passes through, so rehydrating 100k random 128-bit keys does not build 128-deep chains.
"""

from __future__ import annotations

from collections.abc import Iterable

from kinesis_core.errors import ValidationError
from kinesis_core.shards.hashing import parse_explicit_hash_key


class _Node:
    """The subtree of [lo, lo + 2**size_bits); its own key is the midpoint ``mid``.

    It holds the keys of its interval except ``lo`` itself (``lo`` is an ancestor's midpoint),
    but the interval [0, 1) holds key 0. ``pending`` lists keys not pushed to children yet.
    """

    __slots__ = ("capacity", "count", "left", "lo", "mid", "pending", "right", "size_bits", "used")

    def __init__(self, lo: int, size_bits: int) -> None:
        self.lo = lo
        self.size_bits = size_bits
        self.mid = lo + ((1 << size_bits) >> 1)
        self.capacity = _capacity(lo, size_bits)
        self.used = False
        self.count = 0
        self.pending: list[int] | None = []
        self.left: _Node | None = None
        self.right: _Node | None = None


def _capacity(lo: int, size_bits: int) -> int:
    return (1 << size_bits) - 1 + (lo == 0)


class BalancedKeyAllocator:
    """Deterministic allocator of explicit hash keys (ints in [0, 2**bits)).

    ``existing`` keys (ints or decimal strings) are added first, as by :meth:`add`.
    ``bits`` is 128 for Kinesis; smaller values make examples readable.
    """

    def __init__(self, existing: Iterable[int | str] = (), *, bits: int = 128) -> None:
        if not 1 <= bits <= 128:
            raise ValidationError("bits", f"must lie in [1, 128], got {bits}")
        self.bits = bits
        self._root = _Node(0, bits)
        self._keys: set[int] = set()
        for key in existing:
            self.add(key)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def _parse(self, key: int | str) -> int:
        value = parse_explicit_hash_key(key, "key")
        if value >> self.bits:
            raise ValidationError("key", f"must lie in [0, 2**{self.bits} - 1], got {value}")
        return value

    def add(self, key: int | str) -> bool:
        """Record a key already in use, so new keys avoid and balance against it.

        Returns False if it was already known.
        """
        value = self._parse(key)
        if value in self._keys:
            return False
        self._keys.add(value)
        node = self._root
        while True:
            node.count += 1
            if value == node.mid:
                node.used = True
                return True
            if node.pending is not None:
                node.pending.append(value)
                return True
            child = node.left if value < node.mid else node.right
            assert child is not None  # a value can only route to a subtree that can hold it
            node = child

    def discard(self, key: int | str) -> bool:
        """Forget a key (its entity is gone). Returns False if it was not known."""
        value = self._parse(key)
        if value not in self._keys:
            return False
        self._keys.remove(value)
        node = self._root
        while True:
            node.count -= 1
            if value == node.mid:
                node.used = False
                return True
            if node.pending is not None:
                node.pending.remove(value)
                return True
            child = node.left if value < node.mid else node.right
            assert child is not None
            node = child

    def next_key(self) -> int:
        """Allocate and return the next balanced key."""
        node = self._root
        if node.capacity == node.count:
            raise ValidationError("key", f"all {len(self._keys)} keys of 2**{self.bits} are used")
        # The subtree has room, so the walk ends at a free key: count it on the way down.
        while node.used:
            node.count += 1
            if node.pending is not None:
                self._split(node)
            left, right = node.left, node.right
            if left is None or left.capacity == left.count:
                assert right is not None
                node = right
            elif right is None or right.capacity == right.count or left.count <= right.count:
                node = left
            else:
                node = right
        node.used = True
        node.count += 1
        self._keys.add(node.mid)
        return node.mid

    def allocate(self, n: int) -> list[int]:
        """The next ``n`` balanced keys, in allocation order."""
        if n < 0:
            raise ValidationError("n", f"must be >= 0, got {n}")
        return [self.next_key() for _ in range(n)]

    def _split(self, node: _Node) -> None:
        """Push a bucket's keys one level down into two new child nodes."""
        pending = node.pending
        assert pending is not None
        node.pending = None
        if node.size_bits == 0:
            return
        half = node.size_bits - 1
        node.left = self._child(node.lo, half, [k for k in pending if k < node.mid])
        node.right = self._child(node.mid, half, [k for k in pending if k > node.mid])

    def _child(self, lo: int, size_bits: int, keys: list[int]) -> _Node | None:
        if _capacity(lo, size_bits) == 0:
            return None
        child = _Node(lo, size_bits)
        child.count = len(keys)
        if child.mid in self._keys:
            child.used = True
            keys.remove(child.mid)
        child.pending = keys
        return child
