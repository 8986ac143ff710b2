"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import rotation


class TestOutputs(unittest.TestCase):
    def test_left(self):
        self.assertEqual(rotation.rotate([1, 2, 3, 4], -1), [2, 3, 4, 1])

    def test_large(self):
        self.assertEqual(rotation.rotate([1, 2, 3], 7), [3, 1, 2])
        self.assertEqual(rotation.rotate([1, 2, 3], 3), [1, 2, 3])

    def test_empty_and_copy(self):
        self.assertEqual(rotation.rotate([], 5), [])
        items = [1, 2]
        self.assertIsNot(rotation.rotate(items, 0), items)


if __name__ == "__main__":
    unittest.main()
