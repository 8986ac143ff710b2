import unittest

import grouping


class TestGrouping(unittest.TestCase):
    def test_parity(self):
        self.assertEqual(grouping.group_by([1, 2, 3, 4], lambda n: n % 2), {1: [1, 3], 0: [2, 4]})


if __name__ == "__main__":
    unittest.main()
