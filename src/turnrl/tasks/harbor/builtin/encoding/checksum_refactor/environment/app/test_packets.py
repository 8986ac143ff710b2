import unittest

import packets


class TestPackets(unittest.TestCase):
    def test_round_trip(self):
        self.assertTrue(packets.is_intact(packets.frame(b"hello")))


if __name__ == "__main__":
    unittest.main()
