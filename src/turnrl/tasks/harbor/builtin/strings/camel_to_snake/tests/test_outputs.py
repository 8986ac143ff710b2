"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import names


class TestOutputs(unittest.TestCase):
    def test_acronym(self):
        self.assertEqual(names.camel_to_snake("HTTPServer"), "http_server")
        self.assertEqual(names.camel_to_snake("getURLPath"), "get_url_path")

    def test_digits(self):
        self.assertEqual(names.camel_to_snake("userID2"), "user_id2")

    def test_plain(self):
        self.assertEqual(names.camel_to_snake("simple"), "simple")
        self.assertEqual(names.camel_to_snake("Pascal"), "pascal")


if __name__ == "__main__":
    unittest.main()
