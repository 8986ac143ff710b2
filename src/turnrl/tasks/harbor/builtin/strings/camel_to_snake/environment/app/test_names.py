import unittest

import names


class TestNames(unittest.TestCase):
    def test_camel(self):
        self.assertEqual(names.camel_to_snake("parseHttpResponse"), "parse_http_response")


if __name__ == "__main__":
    unittest.main()
