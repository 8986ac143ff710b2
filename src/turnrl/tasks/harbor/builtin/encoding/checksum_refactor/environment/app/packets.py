def frame(payload: bytes) -> bytes:
    """`payload` followed by its one-byte checksum."""
    total = 0
    for byte in payload:
        total = (total + byte) % 256
    return payload + bytes([total])


def is_intact(packet: bytes) -> bool:
    """True when the last byte of `packet` is the checksum of the rest."""
    if not packet:
        return False
    total = 0
    for byte in packet[:-1]:
        total = (total + byte) % 256
    return packet[-1] == total
