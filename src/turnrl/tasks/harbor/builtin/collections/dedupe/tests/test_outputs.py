"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import unique


class TestOutputs(unittest.TestCase):
    def test_order(self):
        self.assertEqual(unique.dedupe(["b", "a", "b", "c", "a"]), ["b", "a", "c"])

    def test_empty(self):
        self.assertEqual(unique.dedupe([]), [])

    def test_unchanged_input(self):
        items = [1, 1, 2]
        unique.dedupe(items)
        self.assertEqual(items, [1, 1, 2])


if __name__ == "__main__":
    unittest.main()
