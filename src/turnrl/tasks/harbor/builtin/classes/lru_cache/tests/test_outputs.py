"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import cache


class TestOutputs(unittest.TestCase):
    def test_evicts_least_recent(self):
        c = cache.LRUCache(2)
        c.put("a", 1)
        c.put("b", 2)
        c.get("a")
        c.put("c", 3)
        self.assertIsNone(c.get("b"))
        self.assertEqual((c.get("a"), c.get("c"), len(c)), (1, 3, 2))

    def test_update_is_use(self):
        c = cache.LRUCache(2)
        c.put("a", 1)
        c.put("b", 2)
        c.put("a", 10)
        c.put("c", 3)
        self.assertEqual((c.get("a"), c.get("b")), (10, None))

    def test_capacity(self):
        with self.assertRaises(ValueError):
            cache.LRUCache(0)


if __name__ == "__main__":
    unittest.main()
