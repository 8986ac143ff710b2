import unittest

import stats


class TestStats(unittest.TestCase):
    def test_whole(self):
        self.assertEqual(stats.mean([2, 4]), 3)


if __name__ == "__main__":
    unittest.main()
