"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import grouping


class TestOutputs(unittest.TestCase):
    def test_key_order(self):
        got = grouping.group_by(["apple", "bob", "avocado", "cat"], lambda w: w[0])
        self.assertEqual(list(got), ["a", "b", "c"])
        self.assertEqual(got["a"], ["apple", "avocado"])

    def test_generator(self):
        self.assertEqual(grouping.group_by((n for n in range(3)), lambda n: "x"), {"x": [0, 1, 2]})

    def test_empty(self):
        self.assertEqual(grouping.group_by([], len), {})


if __name__ == "__main__":
    unittest.main()
