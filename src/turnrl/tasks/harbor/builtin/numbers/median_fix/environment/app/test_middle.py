import unittest

import middle


class TestMiddle(unittest.TestCase):
    def test_odd_sorted(self):
        self.assertEqual(middle.median([1, 2, 3]), 2)


if __name__ == "__main__":
    unittest.main()
