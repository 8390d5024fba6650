"""Reads of many vectors (a refit reads every anchor) fetch in PostgreSQL's binary format: the same values as the
ORM's, faster, inside the caller's tenant scope."""

import numpy as np
import pytest

from common.db import values_list_binary, vector_from_binary
from learning.models import VerbPhrase
from tenants.context import tenant_scope
from tenants.services import tenant_create
from tests.conftest import CBU_CATALOGUE

pytestmark = pytest.mark.django_db


def test_a_binary_read_gives_what_the_orm_gives(cbus):
    VerbPhrase.objects.filter(pk=VerbPhrase.objects.order_by("pk").first().pk).update(embedding=None)
    qs = VerbPhrase.objects.order_by("pk").values_list(
        "verb__name", "embedding", "normalized", "id", "tenant_id", "embedding_model"
    )
    expected = list(qs)
    rows = values_list_binary(qs, vectors=(1,))
    assert len(rows) == len(expected) == sum(len(entry.phrases) for entry in CBU_CATALOGUE)
    assert rows[0][1] is None  # a missing vector stays missing
    for got, want in zip(rows, expected, strict=True):
        assert got[0] == want[0] and got[2:] == want[2:]
        if want[1] is not None:
            assert got[1].dtype == np.float32
            np.testing.assert_array_equal(got[1], np.asarray(want[1], dtype=np.float32))


def test_a_binary_read_sees_only_the_callers_tenant(cbus):
    other = tenant_create(slug="elsewhere")
    qs = VerbPhrase.objects.values_list("normalized", "embedding")
    with tenant_scope([other.pk]):
        assert values_list_binary(qs, vectors=(1,)) == []
    assert len(values_list_binary(qs, vectors=(1,))) == qs.count() > 0


def test_a_damaged_binary_vector_is_refused():
    assert vector_from_binary(b"\x00\x02\x00\x00" + np.array([1.5, -2], dtype=">f4").tobytes()).tolist() == [1.5, -2.0]
    with pytest.raises(ValueError, match="dimensions"):
        vector_from_binary(b"\x00\x03\x00\x00" + np.array([1.5, -2], dtype=">f4").tobytes())
