import unittest

import titles


class TestTitles(unittest.TestCase):
    def test_middle(self):
        self.assertEqual(titles.title_case("war and peace"), "War and Peace")


if __name__ == "__main__":
    unittest.main()
