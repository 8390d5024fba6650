"""The secret gate on what real users type: every utterance of BANKING77 and HWU64 (train and test, 24,119 texts
about cards, PINs, passcodes, transfers, alarms and music) is something an agent may keep as a lesson, and none
holds a secret. A rule that refuses one of them would refuse ordinary lessons in production."""

import pytest

from learning import datasets
from memories.write_gate import secret_findings


@pytest.mark.parametrize("dataset", ["banking77", "hwu64"])
def test_no_utterance_of_a_public_intent_data_set_is_taken_for_a_secret(dataset):
    texts = [e.text for split in ("train", "test") for e in datasets.load(split, dataset)]
    assert len(texts) > 10_000
    refused = [(t, [f.kind for f in found]) for t in texts if (found := secret_findings(t))]
    assert refused == []
