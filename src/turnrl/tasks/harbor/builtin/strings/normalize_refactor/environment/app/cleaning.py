def clean_name(name: str) -> str:
    """A person's name with single spaces, each word capitalised."""
    text = " ".join(name.split())
    return text.title()


def clean_sentence(sentence: str) -> str:
    """A sentence with single spaces, its first letter capitalised and a final full stop."""
    text = " ".join(sentence.split())
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    return text if text.endswith(".") else text + "."
