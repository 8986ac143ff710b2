import unittest

import freq


class TestFreq(unittest.TestCase):
    def test_single(self):
        self.assertEqual(freq.top_words(["a"], 1), [("a", 1)])


if __name__ == "__main__":
    unittest.main()
