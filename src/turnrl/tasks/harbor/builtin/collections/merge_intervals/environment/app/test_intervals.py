import unittest

import intervals


class TestIntervals(unittest.TestCase):
    def test_overlap(self):
        self.assertEqual(intervals.merge([(1, 4), (2, 6)]), [(1, 6)])


if __name__ == "__main__":
    unittest.main()
