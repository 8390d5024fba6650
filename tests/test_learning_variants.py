"""The phrase-variant generator: one test per rule of learning/data/variant_rules.yaml."""

import pytest
import yaml

from common.text import normalize_phrase
from learning import datasets
from learning.variants import (
    RULES_PATH,
    drop_fillers,
    flip_number,
    phrase_variants,
    rules_load,
    rules_parse,
    swap_verbs,
    word_zipf,
)


@pytest.fixture
def rules():
    return rules_load()


def test_rules_live_in_the_data_file():
    data = yaml.safe_load(RULES_PATH.read_text())
    assert {"verb_swaps", "drop_words", "drop_prefixes", "singular_suffixes", "plural_suffixes"} <= set(data)
    assert ["list", "show", "display", "get", "view"] in data["verb_swaps"]


def test_articles_are_dropped(rules):
    assert drop_fillers("open the invoice", rules) == "open invoice"
    assert drop_fillers("open an invoice", rules) == "open invoice"


def test_quantifiers_are_dropped(rules):
    assert drop_fillers("list all cbus", rules) == "list cbus"
    assert drop_fillers("archive every ticket", rules) == "archive ticket"


def test_possessives_and_fillers_are_dropped(rules):
    assert drop_fillers("show me my orders", rules) == "show orders"
    assert drop_fillers("refund us please", rules) == "refund"


def test_leading_politeness_is_dropped(rules):
    assert drop_fillers("could you cancel the order", rules) == "cancel order"
    assert drop_fillers("i'd like to book a flight", rules) == "book flight"


def test_a_phrase_of_only_fillers_is_kept(rules):
    assert drop_fillers("the", rules) == "the"


def test_list_show_display_get_view_swap(rules):
    assert swap_verbs("list cbus", rules) == ["show cbus", "display cbus", "get cbus", "view cbus"]
    assert set(swap_verbs("view orders", rules)) == {"list orders", "show orders", "display orders", "get orders"}


def test_find_search_swap_including_multiword_forms(rules):
    assert set(swap_verbs("search for invoices", rules)) == {
        "find invoices",
        "search invoices",
        "look for invoices",
        "locate invoices",
    }
    assert "search for tickets" in swap_verbs("find tickets", rules)


def test_only_the_leading_word_is_swapped(rules):
    assert swap_verbs("cbus to list", rules) == []
    assert swap_verbs("listing", rules) == []


def test_plural_to_singular(rules):
    assert flip_number("cbus", rules) == "cbu"
    assert flip_number("categories", rules) == "category"
    assert flip_number("addresses", rules) == "address"
    assert flip_number("boxes", rules) == "box"
    assert flip_number("batches", rules) == "batch"


def test_singular_to_plural(rules):
    assert flip_number("invoice", rules) == "invoices"
    assert flip_number("category", rules) == "categories"
    assert flip_number("address", rules) == "addresses"
    assert flip_number("day", rules) == "days"  # vowel + y


def test_irregular_and_invariant_words(rules):
    assert flip_number("person", rules) == "people"
    assert flip_number("people", rules) == "person"
    assert flip_number("status", rules) is None
    assert flip_number("news", rules) is None
    assert flip_number("it", rules) is None  # too short


def test_a_singular_article_goes_when_the_noun_becomes_plural():
    assert "delete cbus" in phrase_variants("delete a cbu", limit=50)
    assert "delete a cbus" not in phrase_variants("delete a cbu", limit=50)


def test_rules_compose_and_the_original_is_never_a_variant():
    variants = phrase_variants("List all CBUs!", limit=50)
    assert "list all cbus" not in variants
    assert {"list cbus", "list all cbu", "show cbus", "show all cbus", "show cbu"} <= set(variants)
    assert variants[0] == "list cbus"  # most conservative first
    assert len(variants) == len(set(variants))


def test_limit_and_empty_input():
    assert len(phrase_variants("list all cbus", limit=3)) == 3
    assert phrase_variants("   ", limit=5) == []


def test_rules_are_not_tied_to_one_domain():
    custom = rules_parse(
        {
            "verb_swaps": [["buy", "purchase"]],
            "drop_words": {"x": ["some"]},
            "singular_suffixes": [["s", ""]],
            "plural_suffixes": [["", "s"]],
        }
    )
    assert phrase_variants("buy some apples", rules=custom, limit=10) == [
        "buy apples",
        "buy some apple",
        "buy apple",
        "purchase apples",
        "purchase some apples",
        "purchase apple",
        "purchase some apple",
    ]


@pytest.mark.parametrize(
    "phrase, junk",
    [
        ("my card has not arrived", "card has not arriveds"),
        ("transfer money", "transfer moneys"),
        ("get cash", "obtain cashes"),
        ("withdraw cash", "withdraw cashes"),
    ],
)
def test_no_ungrammatical_number_flips(rules, phrase, junk):
    variants = phrase_variants(phrase, limit=50, rules=rules)
    assert junk not in variants and not any(v.endswith(("arriveds", "moneys", "cashes")) for v in variants)


def test_number_flips_that_english_uses_are_kept(rules):
    assert flip_number("cards", rules) == "card" and flip_number("card", rules) == "cards"
    assert flip_number("identity", rules) == "identities"  # a real plural, about as common
    assert flip_number("cbus", rules) == "cbu"  # a domain's own word: both forms are known
    assert flip_number("arrived", rules) is None and flip_number("money", rules) is None


@pytest.mark.parametrize("dataset", ["banking77", "hwu64"])
def test_variants_of_every_training_phrase_use_only_english_words(rules, dataset):
    """Every word a variant adds to a phrase is in wordfreq's English word list (the maintained frequency lists
    that ship with the package), over all training phrases of both data sets."""
    assert datasets.available(dataset), f"{dataset} is missing under {datasets.dataset_dir(dataset)}"
    unknown: dict[str, str] = {}
    phrases = {normalize_phrase(e.text) for e in datasets.load("train", dataset)}
    for phrase in phrases:
        words = set(phrase.split())
        for variant in phrase_variants(phrase, limit=12, rules=rules):
            for word in set(variant.split()) - words:
                if word_zipf(word) == 0:
                    unknown.setdefault(word, f"{phrase!r} -> {variant!r}")
    assert not unknown, list(unknown.items())[:20]
