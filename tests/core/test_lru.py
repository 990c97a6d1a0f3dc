"""The bounded LRU map behind the key registries and the Ray workers' handle cache."""

from __future__ import annotations

import pytest

from unifl.core.lru import LruCache


def test_the_least_recently_used_entry_goes_first():
    c: LruCache[int, str] = LruCache(2)
    c.put(1, "a")
    c.put(2, "b")
    assert c.get(1) == "a"             # 1 used: 2 is now the oldest
    c.put(3, "c")
    assert c.get(2) is None and c.get(1) == "a" and c.get(3) == "c" and len(c) == 2
    c.put(1, "a2")                     # a put under a kept key replaces it and marks it used
    c.put(4, "d")
    assert c.get(3) is None and c.get(1) == "a2" and len(c) == 2


def test_get_or_put_makes_a_value_once_per_kept_key():
    made: list[int] = []
    c: LruCache[int, int] = LruCache(2)
    for k in (1, 1, 2, 1, 3, 2):
        c.get_or_put(k, lambda k=k: made.append(k) or 10 * k)
    # 1 and 2 made; 1 kept by its use when 3 came, 2 dropped then and made again, dropping 1
    assert made == [1, 2, 3, 2]
    assert c.get_or_put(3, lambda: -1) == 30 and c.get_or_put(1, lambda: -1) == -1


def test_a_cache_holds_at_least_one_entry():
    with pytest.raises(ValueError, match="at least one"):
        LruCache(0)
