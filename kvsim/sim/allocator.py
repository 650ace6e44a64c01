"""MLX's allocators: size rounding, the shared buffer cache, and the byte counters.

Ports the rules of ``mlx/backend/common/buffer_cache.h`` and the Metal, CUDA and
no-GPU allocators (shared/reference/mlx-memory.md section 1). Time-free: the engine
decides *when* ``malloc`` and ``free`` happen.
"""

from __future__ import annotations

import bisect
import itertools
from collections import OrderedDict

from kvsim.sim.profile import BackendProfile


def rounded_size(profile: BackendProfile, size_bytes: int) -> int:
    """The buffer length the backend allocates for a request."""
    page = profile.page_bytes
    if profile.rounding == "none" or size_bytes == 0:
        return size_bytes
    if profile.rounding == "cuda":
        if size_bytes <= 8:
            return 8
        if size_bytes < page:
            return 1 << (size_bytes - 1).bit_length()
        return -(-size_bytes // page) * page
    return -(-size_bytes // page) * page if size_bytes > page else size_bytes  # metal


class BufferCache:
    """Freed buffers kept for reuse: best fit in ``[s, min(2s, s + window))``, LRU eviction."""

    def __init__(self, window_bytes: int) -> None:
        self.window_bytes = window_bytes
        self._sizes: list[tuple[int, int]] = []  # sorted (length, seq): oldest first among equals
        self._lru: OrderedDict[int, int] = OrderedDict()  # seq -> length, oldest first
        self._seq = itertools.count()
        self.cache_bytes = 0

    def __len__(self) -> int:
        return len(self._lru)

    def put(self, length_bytes: int) -> None:
        seq = next(self._seq)
        bisect.insort(self._sizes, (length_bytes, seq))
        self._lru[seq] = length_bytes
        self.cache_bytes += length_bytes

    def reload(self, lengths: list[int] | tuple[int, ...]) -> None:
        """Hold exactly ``lengths``, oldest first: what putting them in that order into an empty cache gives."""
        self._seq = itertools.count(len(lengths))
        self._lru.clear()  # in place: a decision log may hold these containers
        self._lru.update(enumerate(lengths))
        self._sizes[:] = sorted((length, seq) for seq, length in enumerate(lengths))
        self.cache_bytes = sum(lengths)

    def take(self, size_bytes: int) -> int | None:
        """Length of the reused buffer, or ``None`` on a miss."""
        i = bisect.bisect_left(self._sizes, (size_bytes, -1))
        if i == len(self._sizes):
            return None
        length, seq = self._sizes[i]
        if length >= min(2 * size_bytes, size_bytes + self.window_bytes):
            return None
        del self._sizes[i]
        del self._lru[seq]
        self.cache_bytes -= length
        return length

    def release(self, min_bytes: int) -> None:
        """Free the oldest buffers until ``min_bytes`` are gone (all if ≥ 90% of the pool)."""
        if min_bytes >= 0.9 * self.cache_bytes:
            self.clear()
            return
        freed = 0
        while self._lru and freed < min_bytes:
            seq, length = self._lru.popitem(last=False)
            self._sizes.remove((length, seq))
            self.cache_bytes -= length
            freed += length

    def clear(self) -> None:
        self._sizes.clear()
        self._lru.clear()
        self.cache_bytes = 0


class Allocator:
    """Active, peak and cache counters of one backend, as ``mx.get_*_memory`` report them."""

    def __init__(self, profile: BackendProfile) -> None:
        self.profile = profile
        self.cache = BufferCache(profile.reuse_window_bytes)
        self.active_bytes = 0
        self.peak_bytes = 0
        self.fresh_bytes = 0  # bytes the last malloc took from the system (0 when reused)
        self.footprint_peak_bytes = 0  # largest active + cache: only a miss raises it (kvsim generate's resident)

    @property
    def cache_bytes(self) -> int:
        return self.cache.cache_bytes

    def malloc(self, size_bytes: int) -> int:
        """Allocate; returns the buffer's length (what active memory is charged)."""
        if size_bytes == 0:
            return 0
        p = self.profile
        size = rounded_size(p, size_bytes)
        length = self.cache.take(size) if p.cache_limit_bytes > 0 else None
        self.fresh_bytes = 0
        if length is None:
            length = self.fresh_bytes = size
            if p.rounding != "none":  # GPU allocators evict cache on a miss under pressure
                over = self.active_bytes + self.cache_bytes + size - p.gc_limit_bytes
                if over > 0:
                    self.cache.release(over)
        self.active_bytes += length
        self.peak_bytes = max(self.peak_bytes, self.active_bytes)
        if self.fresh_bytes:
            self.footprint_peak_bytes = max(self.footprint_peak_bytes, self.active_bytes + self.cache_bytes)
        if p.rounding != "none" and self.cache_bytes > p.cache_limit_bytes:
            self.cache.release(self.cache_bytes - p.cache_limit_bytes)
        return length

    def free(self, length_bytes: int) -> None:
        if length_bytes == 0:
            return
        p = self.profile
        self.active_bytes -= length_bytes
        if p.rounding == "none":
            if self.cache_bytes + length_bytes <= p.cache_limit_bytes:
                self.cache.put(length_bytes)
        elif self.cache_bytes < p.cache_limit_bytes:
            self.cache.put(length_bytes)

    def reset_peak(self) -> None:
        """``mx.reset_peak_memory()`` sets the peak to 0; the next malloc raises it."""
        self.peak_bytes = 0

    def clear_cache(self) -> None:
        self.cache.clear()
