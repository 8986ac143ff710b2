"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import nesting


class TestOutputs(unittest.TestCase):
    def test_deep(self):
        self.assertEqual(nesting.flatten([[[1]], [2, [3, [4, []]]]]), [1, 2, 3, 4])

    def test_values(self):
        self.assertEqual(nesting.flatten(["ab", (1, 2), [None]]), ["ab", (1, 2), None])

    def test_empty(self):
        self.assertEqual(nesting.flatten([]), [])


if __name__ == "__main__":
    unittest.main()
