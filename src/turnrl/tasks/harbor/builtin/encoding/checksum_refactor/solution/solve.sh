#!/bin/bash
# Reference solution: whole files written.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
cat > packets.py <<'EOF'
def checksum(data: bytes) -> int:
    """The sum of the bytes of `data`, modulo 256."""
    return sum(data) % 256


def frame(payload: bytes) -> bytes:
    """`payload` followed by its one-byte checksum."""
    return payload + bytes([checksum(payload)])


def is_intact(packet: bytes) -> bool:
    """True when the last byte of `packet` is the checksum of the rest."""
    if not packet:
        return False
    return packet[-1] == checksum(packet[:-1])
EOF
