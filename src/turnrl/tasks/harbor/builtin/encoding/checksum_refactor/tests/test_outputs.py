"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import packets


class TestOutputs(unittest.TestCase):
    def test_checksum(self):
        self.assertEqual(packets.checksum(b""), 0)
        self.assertEqual(packets.checksum(bytes([200, 100])), 44)

    def test_behaviour_kept(self):
        self.assertEqual(packets.frame(b"\x01\x02"), b"\x01\x02\x03")
        self.assertFalse(packets.is_intact(b"\x01\x02\x04"))
        self.assertFalse(packets.is_intact(b""))

    def test_uses_checksum(self):
        import inspect

        for fn in (packets.frame, packets.is_intact):
            source = inspect.getsource(fn)
            self.assertIn("checksum(", source)
            self.assertNotIn("% 256", source)


if __name__ == "__main__":
    unittest.main()
