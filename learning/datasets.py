"""The public intent data sets (read from DATASETS_DIR, never copied into the repo): BANKING77 and HWU64.

Each intent plays a verb ``<domain>.<intent>`` (``banking.<intent>`` for BANKING77, ``hwu64.<intent>`` for
HWU64); training utterances are what users type; the test file is used only for measuring. Every function takes
``dataset`` (default banking77, as before).
"""

import csv
import json
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

DOMAIN = "banking"
DOMAINS = {"banking77": "banking", "hwu64": "hwu64"}


@dataclass(frozen=True)
class Example:
    text: str
    verb: str


def dataset_dir(dataset: str = "banking77") -> Path:
    return Path(settings.DATASETS_DIR) / dataset


def banking77_dir() -> Path:
    return dataset_dir("banking77")


def available(dataset: str = "banking77") -> bool:
    d = dataset_dir(dataset)
    return (d / "train.csv").exists() and (d / "categories.json").exists()


def verb_name(intent: str, dataset: str = "banking77") -> str:
    return f"{DOMAINS[dataset]}.{intent.strip().lower()}"


def intents(dataset: str = "banking77") -> list[str]:
    return json.loads((dataset_dir(dataset) / "categories.json").read_text())


def load(split: str, dataset: str = "banking77") -> list[Example]:
    """``split`` is 'train' or 'test'."""
    with open(dataset_dir(dataset) / f"{split}.csv", newline="", encoding="utf-8") as fh:
        return [Example(row["text"].strip(), verb_name(row["category"], dataset)) for row in csv.DictReader(fh)]


def by_verb(examples: list[Example]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = defaultdict(list)
    for e in examples:
        grouped[e.verb].append(e.text)
    return dict(grouped)


def catalogue_split(per_verb: int = 5, seed: int = 77, dataset: str = "banking77") -> tuple[dict[str, list[str]], list[Example]]:
    """Pick ``per_verb`` training utterances per verb (fixed seed) as catalogue phrases; answer them and the rest."""
    rng = random.Random(seed)
    chosen: dict[str, list[str]] = {}
    rest: list[Example] = []
    for verb, texts in sorted(by_verb(load("train", dataset)).items()):
        texts = sorted(set(texts))
        picked = rng.sample(texts, min(per_verb, len(texts)))
        chosen[verb] = picked
        rest.extend(Example(t, verb) for t in texts if t not in picked)
    return chosen, rest


def describe(intent: str) -> str:
    return intent.replace("_", " ").capitalize() + "."
