"""MLX's buffer cache across a generation's evals: what each eval leaves, what ``mx.clear_cache()`` drops,
and what the decode steps that are not played leave.

mlx-lm 0.32.2's ``generate_step`` calls ``mx.clear_cache()`` after each prefill chunk and every 256 decode
tokens from the first (``generate.py`` L463, L479-480); between clears the freed buffers stay cached
(``mlx/backend/common/buffer_cache.h``) and count in the process's footprint. ``CarriedCache`` keeps the
cache one played eval leaves for the next. A decode step not played repeats the last played one: its
buffers are reused where cached (refilled after a clear), and what a growth left (the caches' old state)
stays cached until the next clear. Not modelled: the buffers that grow by a row every step (attention
scores over the context, unrounded on the CPU) miss the cache and leave their predecessors in it; real CPU
runs gain about 24-32 KB per step this way on 4-layer scaled models (``docs/generation.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvsim.sim.allocator import Allocator, BufferCache
from kvsim.sim.profile import BackendProfile


@dataclass(slots=True)
class CarriedCache:
    """The allocator's buffer cache as the last played eval left it, and a decode step's own buffers."""

    profile: BackendProfile
    cache: BufferCache | None = None
    """The cache the last played eval left (``None`` before any)."""
    step_lengths: list[int] = field(default_factory=list)
    """Buffer lengths the last played decode step left cached, less the state a growth replaced."""
    step_in_cache: bool = False
    """Whether ``step_lengths`` are cached now (false after a clear)."""
    last_footprint_bytes: int = 0
    """Active + cache at most during the last played decode step (weights excluded)."""
    last_cache_after_bytes: int = 0
    repeat_footprint_bytes: int = 0
    """Active + cache at most over the decode steps not played (weights excluded): the last played one's
    footprint plus what the cache has gained since it ended."""

    @property
    def cache_bytes(self) -> int:
        """``mx.get_cache_memory()`` now."""
        return self.cache.cache_bytes if self.cache is not None else 0

    def install(self, alloc: Allocator) -> None:
        """Give a new eval's allocator (its held state already allocated) the carried cache."""
        if self.cache is not None:
            alloc.cache = self.cache

    def played(self, alloc: Allocator, phase: str, freed_state_lengths: list[int]) -> None:
        """Take the cache a played eval left; a decode step's also becomes what a repeat leaves."""
        self.cache = alloc.cache
        if phase != "decode":
            return
        lengths = list(alloc.cache._lru.values())  # oldest first
        for n in freed_state_lengths:  # a growth's old state is cached once, not by every repeat
            if n in lengths:
                lengths.remove(n)
        self.step_lengths, self.step_in_cache = lengths, True
        self.last_footprint_bytes, self.last_cache_after_bytes = alloc.footprint_peak_bytes, alloc.cache_bytes

    def clear(self) -> None:
        """``mx.clear_cache()``."""
        if self.cache is not None:
            self.cache.clear()
        self.step_in_cache = False

    def repeat(self) -> None:
        """A decode step not played: the last played one's buffers, reused where cached (after a clear,
        allocated and freed again)."""
        if not self.step_lengths or self.step_in_cache:
            return
        alloc = Allocator(self.profile)
        if self.cache is not None:
            alloc.cache = self.cache
        for n in self.step_lengths:
            alloc.free(alloc.malloc(n))
        self.cache, self.step_in_cache = alloc.cache, True
        self.repeat_footprint_bytes = max(self.repeat_footprint_bytes, self.last_footprint_bytes
                                          + self.cache_bytes - self.last_cache_after_bytes)
