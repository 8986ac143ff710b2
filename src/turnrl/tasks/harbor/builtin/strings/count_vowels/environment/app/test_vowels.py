import unittest

import vowels


class TestVowels(unittest.TestCase):
    def test_word(self):
        self.assertEqual(vowels.count_vowels("banana"), 3)

    def test_upper(self):
        self.assertEqual(vowels.count_vowels("AEIOU"), 5)


if __name__ == "__main__":
    unittest.main()
