"""The BANKING77 intent data set (read from DATASETS_DIR, never copied into the repo).

Each intent plays a verb ``banking.<intent>``; training utterances are what users
type; the test file is used only for measuring.
"""

import csv
import json
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

DOMAIN = "banking"


@dataclass(frozen=True)
class Example:
    text: str
    verb: str


def banking77_dir() -> Path:
    return Path(settings.DATASETS_DIR) / "banking77"


def available() -> bool:
    d = banking77_dir()
    return (d / "train.csv").exists() and (d / "categories.json").exists()


def verb_name(intent: str) -> str:
    return f"{DOMAIN}.{intent.strip().lower()}"


def intents() -> list[str]:
    return json.loads((banking77_dir() / "categories.json").read_text())


def load(split: str) -> list[Example]:
    """``split`` is 'train' or 'test'."""
    with open(banking77_dir() / f"{split}.csv", newline="", encoding="utf-8") as fh:
        return [Example(row["text"].strip(), verb_name(row["category"])) for row in csv.DictReader(fh)]


def by_verb(examples: list[Example]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = defaultdict(list)
    for e in examples:
        grouped[e.verb].append(e.text)
    return dict(grouped)


def catalogue_split(per_verb: int = 5, seed: int = 77) -> tuple[dict[str, list[str]], list[Example]]:
    """Pick ``per_verb`` training utterances per verb (fixed seed) as catalogue phrases; answer them and the rest."""
    rng = random.Random(seed)
    chosen: dict[str, list[str]] = {}
    rest: list[Example] = []
    for verb, texts in sorted(by_verb(load("train")).items()):
        texts = sorted(set(texts))
        picked = rng.sample(texts, min(per_verb, len(texts)))
        chosen[verb] = picked
        rest.extend(Example(t, verb) for t in texts if t not in picked)
    return chosen, rest


def describe(intent: str) -> str:
    return intent.replace("_", " ").capitalize() + "."
