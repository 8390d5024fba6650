"""The catalogue changes in production (verbs retired, phrases typed in the admin): nothing learned is deleted by
hand, a retired verb is never offered, a correction of an answer whose verb was retired since still teaches, and
input the database cannot hold is an error on the page."""

import pytest

from learning.catalogue import VerbEntry
from learning.models import EntityAlias, LearnedPhrase, Verb, VerbPhrase
from learning.resolution import resolve
from learning.scoring import Source
from learning.selectors import decision_cache_clear
from learning.services.catalogue import verb_catalogue_load, verb_edit
from learning.services.decisions import decision_prior_fit
from tests.conftest import make_client
from tests.test_learning_decision import BIG

pytestmark = pytest.mark.django_db


def _verb_form(name, phrases):
    data = {
        "name": name,
        "domain": "wire",
        "display_name": "",
        "description": "",
        "is_active": "on",
        "phrases-TOTAL_FORMS": str(len(phrases)),
        "phrases-INITIAL_FORMS": "0",
    }
    data.update({f"phrases-{i}-text": text for i, text in enumerate(phrases)})
    return data


def test_a_verb_is_never_deleted_in_the_admin_so_nothing_learned_goes_with_it(catalogue, su):
    api = make_client(["resolve", "feedback"])
    body = {"text": "spin up a unit for me", "verb": "cbu.create", "user_id": "u1"}
    assert api.post("/api/v1/resolutions/confirm", body, format="json").status_code == 200
    verb = catalogue["cbu.create"]
    assert su.get(f"/admin/learning/verb/{verb.pk}/delete/").status_code == 403
    assert su.post(f"/admin/learning/verb/{verb.pk}/delete/", {"post": "yes"}).status_code == 403
    bulk = {"action": "delete_selected", "_selected_action": [verb.pk], "post": "yes"}
    su.post("/admin/learning/verb/", bulk)
    assert Verb.objects.filter(pk=verb.pk).exists() and LearnedPhrase.objects.filter(verb=verb).count() == 1


@pytest.mark.parametrize("text", ["\N{ARABIC LIGATURE SALLALLAHOU ALAYHE WASALLAM}" * 30, "\N{SQUARE MHZ}" * 200])
def test_a_phrase_too_long_once_normalised_is_an_error_on_the_page_not_a_500(su, text):
    page = su.post("/admin/learning/verb/add/", _verb_form("wire.send", [text]))
    assert page.status_code == 200 and "once normalised" in page.content.decode()
    assert not Verb.objects.filter(name="wire.send").exists() and not VerbPhrase.objects.exists()


def test_an_alias_too_long_once_normalised_is_an_error_on_the_page(su):
    form = {
        "alias": "\N{ARABIC LIGATURE SALLALLAHOU ALAYHE WASALLAM}" * 17,
        "canonical_name": "X",
        "entity_type": "entity",
        "confidence": "1",
        "occurrence_count": "1",
        "source": "manual",
        "is_active": "on",
    }
    page = su.post("/admin/learning/entityalias/add/", form)
    assert page.status_code == 200 and "once normalised" in page.content.decode()
    assert not EntityAlias.objects.exists()


def test_a_verb_retired_in_any_process_is_not_offered_by_the_head_on_the_next_resolve(settings):
    settings.RESOLVE_PROMOTE_MIN_LABELS = 10**6
    verb_catalogue_load(entries=BIG)
    decision_prior_fit()
    decision_cache_clear()
    text = "will there be snow in oslo next week"
    before = resolve(text=text)
    assert "weather.get" in {c.verb for c in before.candidates} | {before.verb}
    verb = Verb.objects.get(name="weather.get")
    verb.is_active = False
    verb_edit(verb=verb)  # no cache of this process is told: another process retired it
    after = resolve(text=text)
    named = {c.verb for c in after.candidates} | {o.verb for o in after.options} | {after.verb}
    assert "weather.get" not in named


def test_a_correction_of_an_answer_whose_verb_was_retired_since_still_teaches(catalogue):
    api = make_client(["resolve", "feedback"])
    body = {"text": "spin up a unit for me", "verb": "cbu.create", "user_id": "u1"}
    assert api.post("/api/v1/resolutions/confirm", body, format="json").status_code == 200
    verb_catalogue_load(entries=[VerbEntry("cbu.create", "cbu", "Create a CBU", "", ["create a cbu"], is_active=False)])
    correct = {"text": "spin up a unit for me", "wrong_verb": "cbu.create", "correct_verb": "cbu.list", "user_id": "u1"}
    answer = api.post("/api/v1/resolutions/correct", correct, format="json")
    assert answer.status_code == 200, answer.content  # before: 400 unknown_verb, the correction lost
    assert LearnedPhrase.objects.get(normalized="spin up a unit for me", user_id="u1").verb.name == "cbu.list"
    r = api.post("/api/v1/resolve", {"text": "spin up a unit for me", "user_id": "u1"}, format="json").json()
    assert (r["outcome"], r["verb"]) == ("resolved", "cbu.list")
    unknown = api.post("/api/v1/resolutions/correct", {**correct, "wrong_verb": "cbu.nothing"}, format="json")
    assert unknown.status_code == 400 and "wrong_verb" in unknown.json()["fields"]


def test_a_verb_switched_off_and_another_on_refits_the_prior_even_when_as_many_phrases_remain(
    settings, django_capture_on_commit_callbacks
):
    """The prior was refitted only when the number of phrases changed: retiring a verb and switching on another of
    as many phrases left it scoring the retired verb and blind to the new one, for good."""
    from learning.models import DecisionFit
    from learning.selectors import decision_head
    from learning.services.decisions import decision_refit

    settings.RESOLVE_PROMOTE_MIN_LABELS = 10**6
    entries = [VerbEntry(e.name, e.domain, "", "", e.phrases, is_active=e.name != "meeting.book") for e in BIG]
    verb_catalogue_load(entries=entries)
    first = decision_prior_fit()
    assert len(VerbPhrase.objects.filter(verb__name="meeting.book")) == len(VerbPhrase.objects.filter(verb__name="weather.get"))
    with django_capture_on_commit_callbacks(execute=True) as sent:
        for name, active in (("meeting.book", True), ("weather.get", False)):
            verb = Verb.objects.get(name=name)
            verb.is_active = active
            verb_edit(verb=verb)
    assert len(sent) >= 2  # each switch sends the prior's refit (here it runs at once)
    newest = DecisionFit.objects.filter(source="prior").order_by("-version").first()
    assert newest.version > first.version
    head_verbs = set(decision_head(newest.version, None)[1])
    assert "meeting.book" in head_verbs and "weather.get" not in head_verbs
    assert decision_refit()["prior"] is None  # up to date now: the daily refit leaves it


def test_reloading_the_file_keeps_what_the_admin_changed_unless_the_file_says_otherwise(tmp_path):
    from io import StringIO

    from django.core.management import call_command

    catalogue = tmp_path / "verbs.yaml"
    catalogue.write_text(
        "verbs:\n"
        "  - name: cbu.create\n    display_name: Create a CBU\n    phrases: [create a cbu]\n"
        "  - name: cbu.list\n    phrases: [list the cbus]\n"
    )
    call_command("load_verbs", str(catalogue), "--no-progress", stdout=StringIO())
    verb = Verb.objects.get(name="cbu.create")
    verb.is_active, verb.description = False, "Replaced by cbu.open."
    verb_edit(verb=verb)

    out = StringIO()
    call_command("load_verbs", str(catalogue), "--no-progress", stdout=out)
    verb.refresh_from_db()
    assert (verb.is_active, verb.description, verb.display_name) == (False, "Replaced by cbu.open.", "Create a CBU")
    assert "switched back on" not in out.getvalue()
    assert resolve(text="create a cbu").verb != "cbu.create"

    catalogue.write_text(catalogue.read_text().replace("    display_name: Create a CBU\n", "    is_active: true\n"))
    out = StringIO()
    call_command("load_verbs", str(catalogue), "--no-progress", stdout=out)
    verb.refresh_from_db()
    assert verb.is_active and "verbs switched back on by the file: cbu.create" in out.getvalue()
    assert Verb.objects.get(name="cbu.list").is_active  # a new verb is active when the file does not say


def test_the_admin_refuses_a_domain_a_catalogue_file_could_not_name(su):
    form = {**_verb_form("wire.send", ["send a wire"]), "domain": "Wire Transfers!"}
    page = su.post("/admin/learning/verb/add/", form)
    assert page.status_code == 200 and "lowercase identifier" in page.content.decode()
    assert not Verb.objects.filter(name="wire.send").exists()
    assert su.post("/admin/learning/verb/add/", {**form, "domain": "wire_transfers"}).status_code == 302


def test_a_block_can_be_prepared_for_a_retired_verb_and_holds_when_it_comes_back(gov_api, catalogue):
    verb = catalogue["cbu.delete"]
    verb.is_active = False
    verb_edit(verb=verb)
    body = {"phrase": "delete a cbu for the ceo", "verb": "cbu.delete", "reason": "needs approval"}
    answer = gov_api.post("/api/v1/blocklist", body, format="json")
    assert answer.status_code == 201, answer.content
    verb.is_active = True
    verb_edit(verb=verb)
    r = resolve(text="delete a cbu for the ceo")
    assert r.verb != "cbu.delete" and "cbu.delete" in r.explanation["blocks"]
    unknown = gov_api.post("/api/v1/blocklist", {**body, "verb": "cbu.nothing"}, format="json")
    assert unknown.status_code == 400 and "verb" in unknown.json()["fields"]


def test_a_reload_that_replaces_phrases_removes_those_the_file_no_longer_lists(tmp_path, settings):
    from io import StringIO

    from django.core.management import call_command

    catalogue = tmp_path / "verbs.yaml"
    catalogue.write_text(
        "verbs:\n"
        "  - name: cbu.create\n    phrases: [create a cbu, new cbu, open a cbu]\n"
        "  - name: cbu.list\n    phrases: [list the cbus]\n"
    )
    call_command("load_verbs", str(catalogue), "--no-progress", stdout=StringIO())
    create = Verb.objects.get(name="cbu.create")
    VerbPhrase.objects.create(verb=create, text="make a cbu", normalized="make a cbu")  # typed in the admin

    def phrases(name):
        return set(VerbPhrase.objects.filter(verb__name=name).values_list("normalized", flat=True))

    # "open a cbu" was a mistake: dropped from the file; cbu.list's entry now says nothing of phrases
    catalogue.write_text("verbs:\n  - name: cbu.create\n    phrases: [create a cbu, new cbu]\n  - name: cbu.list\n")
    out = StringIO()
    call_command("load_verbs", str(catalogue), "--no-progress", stdout=out)  # a plain reload only adds
    assert phrases("cbu.create") == {"create a cbu", "new cbu", "open a cbu", "make a cbu"}
    assert "removed" not in out.getvalue()

    out = StringIO()
    call_command("load_verbs", str(catalogue), "--no-progress", "--replace-phrases", stdout=out)
    assert phrases("cbu.create") == {"create a cbu", "new cbu"}
    assert phrases("cbu.list") == {"list the cbus"}  # its entry lists no phrases: kept
    assert "phrases added: 0, removed: 2" in out.getvalue()
    assert Source.PHRASE_EXACT not in {c.source for c in resolve(text="open a cbu").candidates}
    assert Source.PHRASE_EXACT in {c.source for c in resolve(text="create a cbu").candidates}


def test_a_load_names_the_phrases_another_verb_holds_too_and_resolve_asks_between_them(tmp_path):
    from io import StringIO

    from django.core.management import call_command

    catalogue = tmp_path / "verbs.yaml"
    catalogue.write_text(
        "verbs:\n"
        "  - name: card.freeze\n    domain: cards\n    phrases: [freeze my card, block my card]\n"
        "  - name: card.cancel\n    domain: cards\n    phrases: [cancel my card, block my card]\n"
    )
    err = StringIO()
    call_command("load_verbs", str(catalogue), "--no-progress", stdout=StringIO(), stderr=err)
    assert "1 phrase(s) of the file belong to more than one active verb" in err.getvalue() and "block my card" in err.getvalue()
    answer = resolve(text="block my card")
    assert answer.verb is None and {o.verb for o in answer.options[:2]} == {"card.freeze", "card.cancel"}
    err = StringIO()
    call_command("load_verbs", str(catalogue), "--no-progress", stdout=StringIO(), stderr=err)
    assert "more than one active verb" in err.getvalue()  # said again on every load until the file changes
    catalogue.write_text(
        catalogue.read_text().replace("  - name: card.cancel\n", "  - name: card.cancel\n    is_active: false\n")
    )
    err = StringIO()
    call_command("load_verbs", str(catalogue), "--no-progress", stdout=StringIO(), stderr=err)
    assert "more than one" not in err.getvalue()  # the other verb retired: resolve offers only card.freeze
    assert resolve(text="block my card").verb == "card.freeze"
