import unittest

import tally


class TestTally(unittest.TestCase):
    def test_count(self):
        t = tally.Tally()
        t.add("a")
        t.add("a", 2)
        self.assertEqual(t.count("a"), 3)


if __name__ == "__main__":
    unittest.main()
