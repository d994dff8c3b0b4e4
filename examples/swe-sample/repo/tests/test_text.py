from minilib.text import title_case, word_count


def test_title_case():
    assert title_case("hello wORLD") == "Hello WORLD"


def test_word_count_simple():
    assert word_count("a b c") == 3
