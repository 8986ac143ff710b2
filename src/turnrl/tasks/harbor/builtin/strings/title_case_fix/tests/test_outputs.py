"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import titles


class TestOutputs(unittest.TestCase):
    def test_first_word(self):
        self.assertEqual(titles.title_case("the lord of the rings"), "The Lord of the Rings")

    def test_upper_input(self):
        self.assertEqual(titles.title_case("A TALE OF TWO CITIES"), "A Tale of Two Cities")

    def test_single(self):
        self.assertEqual(titles.title_case("of"), "Of")


if __name__ == "__main__":
    unittest.main()
