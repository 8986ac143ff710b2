import unittest

import textutils


class TestTextutils(unittest.TestCase):
    def test_title(self):
        self.assertEqual(textutils.slugify("Hello World"), "hello-world")


if __name__ == "__main__":
    unittest.main()
