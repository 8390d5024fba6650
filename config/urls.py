from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from learning import api as learning_api

api_v1 = [
    path("resolve", learning_api.ResolveApi.as_view(), name="resolve"),
]

# issue 5 (mem): memories
from learning import memory_api  # noqa: E402

api_v1 += [
    path("memories/observe", memory_api.MemoryObserveApi.as_view(), name="memory-observe"),
    path("memories/retrieve", memory_api.MemoryRetrieveApi.as_view(), name="memory-retrieve"),
    path("memories/feedback", memory_api.MemoryFeedbackApi.as_view(), name="memory-feedback"),
    path("memories/search", memory_api.MemorySearchApi.as_view(), name="memory-search"),
]  # end issue 5 (mem)

# issue 3 (gov): learning governance
from learning import governance_api as gov_api  # noqa: E402

api_v1 += [
    path("learning/candidates", gov_api.CandidateListApi.as_view(), name="candidate-list"),
    path("learning/candidates/<int:candidate_id>/approve", gov_api.CandidateApproveApi.as_view(), name="candidate-approve"),
    path("learning/candidates/<int:candidate_id>/reject", gov_api.CandidateRejectApi.as_view(), name="candidate-reject"),
    path("learning/stats", gov_api.LearningStatsApi.as_view(), name="learning-stats"),
    path("learning/import", gov_api.PhraseImportApi.as_view(), name="learning-import"),
    path("blocklist", gov_api.BlockCreateApi.as_view(), name="blocklist-create"),
    path("blocklist/<int:block_id>", gov_api.BlockDetailApi.as_view(), name="blocklist-detail"),
    path("blocklist/<int:block_id>/expire", gov_api.BlockExpireApi.as_view(), name="blocklist-expire"),
    path("feedback/correction", gov_api.CorrectionApi.as_view(), name="feedback-correction"),
]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="redoc"),
    path("api/v1/", include(api_v1)),
]

handler400 = "config.views.bad_request"
handler404 = "config.views.not_found"
handler500 = "config.views.server_error"
