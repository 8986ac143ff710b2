import unittest

import cache


class TestCache(unittest.TestCase):
    def test_put_get(self):
        c = cache.LRUCache(2)
        c.put("a", 1)
        self.assertEqual(c.get("a"), 1)


if __name__ == "__main__":
    unittest.main()
