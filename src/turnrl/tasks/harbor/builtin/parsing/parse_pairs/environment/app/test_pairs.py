import unittest

import pairs


class TestPairs(unittest.TestCase):
    def test_two(self):
        self.assertEqual(pairs.parse_pairs("a=1; b = 2"), {"a": "1", "b": "2"})


if __name__ == "__main__":
    unittest.main()
