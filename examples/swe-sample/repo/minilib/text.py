"""Small text helpers."""


def title_case(s):
    """Capitalises the first letter of every word, keeping the rest as written.

    title_case("hello wORLD") == "Hello WORLD"
    """
    return " ".join(w[:1].upper() + w[1:] for w in s.split(" "))


def word_count(s):
    """Number of whitespace-separated words."""
    return len(s.split(" "))
