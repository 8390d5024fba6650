"""What reaches a view outside a JSON body: form and multipart bodies in a charset that cannot decode them, form
fields with a lone surrogate, more query parameters than Django takes, ``?format=``, and query parameters a write
does not take. Each is a 400 that says why (naming the field where there is one), never a 500, and stores nothing."""

import pytest
from django.test import Client

from learning.models import LearnedPhrase
from tests.conftest import make_client

pytestmark = pytest.mark.django_db

MULTIPART_CSV = b'--XyZ\r\nContent-Disposition: form-data; name="format"\r\n\r\ncsv\r\n--XyZ--\r\n'


def _import(content_type: str, body: bytes):
    api = make_client(["governance"])
    api.raise_request_exception = False
    return api.generic("POST", "/api/v1/learning/import", data=body, content_type=content_type)


@pytest.mark.parametrize(
    "content_type, body",
    [
        ("application/x-www-form-urlencoded; charset=punycode", b"format=csv&content=phrase%2Cverb%0Ax%2Ccbu.list%0A"),
        ("multipart/form-data; boundary=XyZ; charset=idna", MULTIPART_CSV),
        ("multipart/form-data; boundary=XyZ; charset=punycode", MULTIPART_CSV.replace(b"csv", "é".encode())),
    ],
)
def test_an_import_body_its_charset_cannot_decode_is_a_400(catalogue, content_type, body):
    answer = _import(content_type, body)
    assert answer.status_code == 400 and "charset" in answer.json()["detail"], answer.content[:300]
    assert not LearnedPhrase.objects.exists()


@pytest.mark.parametrize(
    "content_type, body, field",
    [
        ("application/x-www-form-urlencoded; charset=unicode_escape", b"%5Cud800=1", "form"),
        ("application/x-www-form-urlencoded; charset=unicode_escape", b"format=%5Cud800&content=x", "format"),
        (
            "multipart/form-data; boundary=XyZ; charset=unicode_escape",
            b'--XyZ\r\nContent-Disposition: form-data; name="\\ud800"\r\n\r\n1\r\n--XyZ--\r\n',
            "form",
        ),
    ],
)
def test_an_import_form_with_a_lone_surrogate_is_a_400_naming_the_field(catalogue, content_type, body, field):
    answer = _import(content_type, body)
    assert answer.status_code == 400 and field in answer.json()["fields"], answer.content[:300]


@pytest.mark.parametrize("charset", ["idna", "base64"])
def test_a_multipart_post_outside_the_api_in_an_undecodable_charset_is_a_400(charset):
    body = b'--XyZ\r\nContent-Disposition: form-data; name="username"\r\n\r\na\r\n--XyZ--\r\n'
    answer = Client(raise_request_exception=False).generic(
        "POST", "/admin/login/", data=body, content_type=f"multipart/form-data; boundary=XyZ; charset={charset}"
    )
    assert answer.status_code == 400 and b"charset" in answer.content, answer.content[:300]


def test_more_query_parameters_than_django_takes_says_so(settings):
    answer = make_client(["resolve", "feedback"]).get("/api/v1/proposals?" + "&".join(f"p{i}=1" for i in range(1001)))
    assert answer.status_code == 400 and "DATA_UPLOAD_MAX_NUMBER_FIELDS" in answer.json()["detail"], answer.json()


def test_format_is_a_query_parameter_like_any_other_not_a_404():
    answer = make_client(["resolve", "feedback"]).get("/api/v1/proposals?format=xml")
    assert answer.status_code == 400 and "format" in answer.json()["fields"], answer.content


def test_a_write_refuses_a_query_parameter_it_does_not_take_and_stores_nothing():
    from feedback.models import Proposal

    body = {"action": "email.send", "proposed_action": {}, "reasoning": {"confidence": 0.5}}
    answer = make_client(["resolve", "feedback"]).post("/api/v1/proposals?dry_run=true", body, format="json")
    assert answer.status_code == 400 and "dry_run" in answer.json()["fields"], answer.content
    assert not Proposal.objects.exists()
