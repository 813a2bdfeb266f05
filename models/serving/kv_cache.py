"""Paged KV-cache block pool of one replica, with vLLM V1 automatic prefix caching.

vLLM hashes every FULL block of a sequence as a chain (block i's hash covers all tokens up to
the end of block i), keeps freed blocks in one LRU free queue (a request's blocks are freed in
reverse order, so its tail is evicted first) and evicts a cached block only when the queue hands
it out again. Prompts here are segments, not tokens, so the cache is a trie of segment chains:

* A PrefixNode stands for one segment in the context of everything before it. It owns the full
  blocks whose last token lies inside that segment (the block straddling the boundary with the
  previous segment belongs to this node: its hash depends on this segment's tokens).
* `resident` blocks of a node are cached; they always form a prefix of the node's blocks, and a
  chain from the root is cached exactly up to the first node that is not fully resident.
* Each holding request references a prefix of each node on its path (`full_refs` counts whole
  holders, `partial` the few mid-prefill ones); resident blocks beyond the longest reference are
  evictable and sit in the LRU free queue together with runs of uncached free blocks.

All bookkeeping is per segment and per request, never per token or per block.
"""

from __future__ import annotations

from collections import OrderedDict

from models.serving.request import Request, Segment


class PrefixNode:
    """One segment of a cached token chain (see module docstring)."""

    __slots__ = (
        "b0",
        "children",
        "end",
        "full_refs",
        "in_lru",
        "key",
        "nblocks",
        "parent",
        "partial",
        "pins",
        "resident",
    )

    def __init__(
        self, parent: PrefixNode | None, key: Segment | None, end: int, block_size: int
    ) -> None:
        self.parent = parent
        self.key = key
        self.children: dict[Segment, PrefixNode] = {}
        start = parent.end if parent is not None else 0
        self.end = end  # token offset where the segment ends
        self.b0 = start // block_size
        self.nblocks = end // block_size - self.b0
        self.resident = 0
        self.pins = 0  # admitted requests whose path contains this node
        self.full_refs = 0
        self.partial: dict[Request, int] | None = None
        self.in_lru = False


def _max_extent(node: PrefixNode) -> int:
    if node.full_refs:
        return node.nblocks
    partial = node.partial
    return max(partial.values()) if partial else 0


class FreeRun:
    """Uncached free blocks that entered the free queue together."""

    __slots__ = ("count",)

    def __init__(self, count: int) -> None:
        self.count = count


class KVBlockPool:
    """Blocks of one replica: held by requests (shared through the trie or private), or free
    (never used, uncached, or cached-but-evictable) in one LRU queue."""

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.free = num_blocks
        self.min_free = num_blocks  # lowest `free` seen: peak usage = num_blocks - min_free
        self.root = PrefixNode(None, None, 0, block_size)
        self._lru: OrderedDict[PrefixNode | FreeRun, None] = OrderedDict()
        self._lru[FreeRun(num_blocks)] = None

    @property
    def used(self) -> int:
        return self.num_blocks - self.free

    @property
    def peak_used(self) -> int:
        return self.num_blocks - self.min_free

    # -- a request's path -----------------------------------------------------------------

    def attach(self, req: Request) -> None:
        """Resolve (creating as needed) and pin the trie path of the request's sequence."""
        req.kv_shared = 0
        req.kv_held = 0
        req.kv_node_idx = 0
        if not self.enable_prefix_caching:
            req.kv_path = []
            req.kv_path_blocks = 0
            return
        bs = self.block_size
        node = self.root
        path = []
        for seg in req.spec.prompt:
            child = node.children.get(seg)
            if child is None:
                child = PrefixNode(node, seg, node.end + seg[1], bs)
                node.children[seg] = child
            child.pins += 1
            path.append(child)
            node = child
        for seg in req.gen_segments:
            child = node.children.get(seg)
            if child is None:
                child = PrefixNode(node, seg, node.end + seg[1], bs)
                node.children[seg] = child
            child.pins += 1
            path.append(child)
            node = child
        req.kv_path = path
        req.kv_path_blocks = node.end // bs

    def detach(self, req: Request) -> None:
        """Undo attach() for a request that holds nothing (its admission failed)."""
        for node in reversed(req.kv_path):
            node.pins -= 1
            if node.pins == 0 and node.resident == 0 and not node.children:
                self._gc(node)
        req.kv_path = []

    @staticmethod
    def cached_blocks(req: Request) -> int:
        """Blocks of the attached request's sequence found in the cache, from the start."""
        chain = 0
        for node in req.kv_path:
            if node.resident < node.nblocks:
                return node.b0 + node.resident
            chain = node.b0 + node.nblocks
        return chain

    def advance(self, req: Request, new_computed: int, commit: bool) -> int:
        """Blocks the pool must give up for the request to hold KV for `new_computed` tokens
        (new allocations plus evictable cached blocks it starts to share; negative when it
        hands back a private block now shared). With commit, do it.

        Full blocks on the request's path are shared through the trie: already-cached ones are
        referenced, missing ones are allocated and registered (vLLM registers blocks when they
        are scheduled, so a request scheduled later in the same step hits them).
        """
        bs = self.block_size
        held_new = -(-new_computed // bs)
        full_new = new_computed // bs
        if full_new > req.kv_path_blocks:
            full_new = req.kv_path_blocks
        shared_old = shared = req.kv_shared
        touched = 0
        extended = 0
        i = req.kv_node_idx
        if shared < full_new:
            path = req.kv_path
            lru = self._lru
            while shared < full_new:
                node = path[i]
                nb = node.nblocks
                if nb == 0:
                    i += 1
                    continue
                b0 = node.b0
                b1 = b0 + nb
                e_old = shared - b0
                target = full_new if full_new < b1 else b1
                e_new = target - b0
                res = node.resident
                if node.full_refs:
                    mx = nb
                else:
                    partial = node.partial
                    mx = max(partial.values()) if partial else 0
                share_to = res if res < e_new else e_new
                if share_to > mx:
                    touched += share_to - mx
                if e_new > res:
                    extended += e_new - res
                if commit:
                    if e_new > res:
                        node.resident = e_new
                    if e_old > 0:
                        del node.partial[req]  # type: ignore[union-attr]
                    if e_new == nb:
                        node.full_refs += 1
                    else:
                        if node.partial is None:
                            node.partial = {}
                        node.partial[req] = e_new
                    if node.in_lru and node.resident <= _max_extent(node):
                        del lru[node]
                        node.in_lru = False
                shared = target
                if target == b1:
                    i += 1
        alloc = (held_new - shared) + extended - (req.kv_held - shared_old)
        if commit:
            self.free -= touched
            if alloc > 0:
                self._take(alloc)
            elif alloc < 0:
                self._give_uncached(-alloc)
            if self.free < self.min_free:
                self.min_free = self.free
            req.kv_shared = shared
            req.kv_held = held_new
            req.kv_node_idx = i
        return alloc + touched

    def allocate(self, n: int) -> None:
        """Hand out n private blocks (decode tokens crossing block boundaries)."""
        if n > 0:
            head = next(iter(self._lru))
            if type(head) is FreeRun:
                if head.count > n:
                    head.count -= n
                    self.free -= n
                else:
                    self._take(n)
            else:
                partial = head.partial
                if head.resident - (max(partial.values()) if partial else 0) > n:
                    head.resident -= n  # evict from the least recently freed cached node
                    self.free -= n
                else:
                    self._take(n)
            if self.free < self.min_free:
                self.min_free = self.free

    def release(self, req: Request, computed: int, gen_segment: Segment | None) -> None:
        """Free everything the request holds, in vLLM's order (tail blocks first).

        computed: tokens whose KV the request holds. gen_segment: on preemption, the generated
        tokens not yet on the request's path; their full computed blocks stay cached under a
        node only this request can hit when it recomputes (on finish, None: such blocks can
        never be hit again, so they are freed as uncached blocks, at the same LRU position).
        """
        bs = self.block_size
        shared = req.kv_shared
        private = -(-computed // bs) - shared
        path = req.kv_path
        gen_node = None
        if gen_segment is not None and path:
            parent = path[-1]
            full = computed // bs
            b0 = parent.end // bs
            if full > b0:
                gen_node = PrefixNode(parent, gen_segment, parent.end + gen_segment[1], bs)
                gen_node.resident = min(gen_node.nblocks, full - b0)
                parent.children[gen_segment] = gen_node
                private -= gen_node.resident
        if private > 0:
            self._give_uncached(private)
        lru = self._lru
        if gen_node is not None:
            lru[gen_node] = None
            gen_node.in_lru = True
            self.free += gen_node.resident
        for node in reversed(path):
            nb = node.nblocks
            if nb:
                e = shared - node.b0
                if e > 0:
                    partial = node.partial
                    if e >= nb:
                        ev_before = 0  # a whole holder leaves nothing evictable
                        node.full_refs -= 1
                    else:
                        ev_before = node.resident - (
                            nb if node.full_refs else max(partial.values())
                        )  # type: ignore[union-attr]
                        del partial[req]  # type: ignore[index]
                    if node.full_refs:
                        ev = 0
                    else:
                        ev = node.resident - (max(partial.values()) if partial else 0)
                    if ev > ev_before:
                        self.free += ev - ev_before
                        # Simplification: all of a node's evictable blocks share one LRU
                        # position (the latest release), instead of one per block.
                        if node.in_lru:
                            lru.move_to_end(node)
                        else:
                            lru[node] = None
                            node.in_lru = True
            node.pins -= 1
            if node.pins == 0 and node.resident == 0 and not node.children:
                self._gc(node)
        req.kv_path = []
        req.kv_shared = 0
        req.kv_held = 0
        req.kv_node_idx = 0

    # -- the free queue -------------------------------------------------------------------

    def _take(self, n: int) -> None:
        """Pop n blocks from the head of the free queue, evicting cached ones."""
        self.free -= n
        lru = self._lru
        while n:
            entry = next(iter(lru))
            if type(entry) is FreeRun:
                count = entry.count
                if count > n:
                    entry.count = count - n
                    return
                del lru[entry]
                n -= count
            else:
                # a node in the free queue has no whole holder (it would have no evictable
                # blocks), so its longest reference is a partial one, if any
                partial = entry.partial  # type: ignore[union-attr]
                ev = entry.resident - (max(partial.values()) if partial else 0)  # type: ignore[union-attr]
                if ev > n:
                    entry.resident -= n  # type: ignore[union-attr]
                    return
                entry.resident -= ev  # type: ignore[union-attr]
                del lru[entry]
                entry.in_lru = False  # type: ignore[union-attr]
                n -= ev
                if entry.resident == 0:  # type: ignore[union-attr]
                    self._gc(entry)  # type: ignore[arg-type]

    def _give_uncached(self, n: int) -> None:
        self.free += n
        lru = self._lru
        if lru:
            last = next(reversed(lru))
            if type(last) is FreeRun:
                last.count += n
                return
        lru[FreeRun(n)] = None

    def _gc(self, node: PrefixNode) -> None:
        root = self.root
        while node is not root and node.pins == 0 and node.resident == 0 and not node.children:
            parent = node.parent
            del parent.children[node.key]  # type: ignore[union-attr,index]
            node = parent  # type: ignore[assignment]

    # -- inspection -----------------------------------------------------------------------

    def check(self, private_blocks: int) -> None:
        """Verify the pool's invariants (debug mode). private_blocks: blocks the running
        requests hold outside the trie."""
        if not 0 <= self.free <= self.num_blocks:
            raise AssertionError(f"free blocks {self.free} outside [0, {self.num_blocks}]")
        queued = 0
        for entry in self._lru:
            if type(entry) is FreeRun:
                if entry.count <= 0:
                    raise AssertionError("empty free run in queue")
                queued += entry.count
            else:
                ev = entry.resident - _max_extent(entry)  # type: ignore[arg-type]
                if ev <= 0 or not entry.in_lru:  # type: ignore[union-attr]
                    raise AssertionError("node in free queue without evictable blocks")
                queued += ev
        if queued != self.free:
            raise AssertionError(f"free queue holds {queued} blocks, counter says {self.free}")
        held_in_trie = 0
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            mx = _max_extent(node)
            if not 0 <= node.resident <= node.nblocks or mx > node.resident:
                raise AssertionError(f"node {node.key}: resident {node.resident}, extent {mx}")
            if node.in_lru != (node.resident > mx) or node.in_lru != (node in self._lru):
                raise AssertionError(f"node {node.key}: free-queue membership inconsistent")
            if node.pins < 0 or node.full_refs < 0 or node.full_refs > node.pins:
                raise AssertionError(f"node {node.key}: pins {node.pins} refs {node.full_refs}")
            for child in node.children.values():
                if child.parent is not node:
                    raise AssertionError("broken parent link")
            held_in_trie += mx
        if held_in_trie + private_blocks != self.used:
            raise AssertionError(
                f"used {self.used} != trie-held {held_in_trie} + private {private_blocks}"
            )
