"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import middle


class TestOutputs(unittest.TestCase):
    def test_unsorted(self):
        self.assertEqual(middle.median([9, 1, 5]), 5)

    def test_even(self):
        self.assertEqual(middle.median([4, 1, 3, 2]), 2.5)

    def test_empty(self):
        with self.assertRaises(ValueError):
            middle.median([])

    def test_input_kept(self):
        values = [3, 1, 2]
        middle.median(values)
        self.assertEqual(values, [3, 1, 2])


if __name__ == "__main__":
    unittest.main()
