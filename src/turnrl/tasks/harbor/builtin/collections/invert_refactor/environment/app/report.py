from mapping import inv


def owners_by_file(file_owner: dict[str, str]) -> dict[str, list[str]]:
    """Each owner -> the files they own."""
    return inv(file_owner)
