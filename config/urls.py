from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from autonomy import api as autonomy_api
from feedback import api as feedback_api
from learning import api as learning_api
from learning import governance_api as gov_api
from learning import memory_api

api_v1 = [
    path("resolve", learning_api.ResolveApi.as_view(), name="resolve"),
    # Disambiguation feedback
    path("disambiguations/<str:request_id>/select", feedback_api.DisambiguationSelectApi.as_view(), name="disambiguation-select"),
    path("disambiguations/<str:request_id>/abandon", feedback_api.DisambiguationAbandonApi.as_view(), name="disambiguation-abandon"),
]

# Learning governance
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
    path("feedback/confirmation", gov_api.ConfirmationApi.as_view(), name="feedback-confirmation"),
]

# Memories
api_v1 += [
    path("memories/observe", memory_api.MemoryObserveApi.as_view(), name="memory-observe"),
    path("memories/retrieve", memory_api.MemoryRetrieveApi.as_view(), name="memory-retrieve"),
    path("memories/feedback", memory_api.MemoryFeedbackApi.as_view(), name="memory-feedback"),
    path("memories/search", memory_api.MemorySearchApi.as_view(), name="memory-search"),
]

# Outcomes, feedback records, patterns, consult, autonomy transitions
api_v1 += [
    path("proposals", feedback_api.ProposalListCreateApi.as_view(), name="proposal-list"),
    path("proposals/<int:pk>", feedback_api.ProposalDetailApi.as_view(), name="proposal-detail"),
    path("proposals/<int:pk>/approve", feedback_api.ProposalApproveApi.as_view(), name="proposal-approve"),
    path("proposals/<int:pk>/reject", feedback_api.ProposalRejectApi.as_view(), name="proposal-reject"),
    path("proposals/<int:pk>/modify", feedback_api.ProposalModifyApi.as_view(), name="proposal-modify"),
    path("executions", feedback_api.ExecutionListCreateApi.as_view(), name="execution-list"),
    path("executions/<int:pk>", feedback_api.ExecutionDetailApi.as_view(), name="execution-detail"),
    path("executions/<int:pk>/review", feedback_api.ExecutionReviewApi.as_view(), name="execution-review"),
    path("outcomes", feedback_api.OutcomeApi.as_view(), name="outcome-report"),
    path("corrections", feedback_api.ManualCorrectionApi.as_view(), name="manual-correction"),
    path("feedback-records", feedback_api.FeedbackRecordListApi.as_view(), name="feedback-record-list"),
    path("mistake-patterns", feedback_api.MistakePatternListApi.as_view(), name="mistake-pattern-list"),
    path("actions", autonomy_api.ActionListApi.as_view(), name="action-list"),
    path("actions/<str:name>/consult", autonomy_api.ActionConsultApi.as_view(), name="action-consult"),
    path("autonomy/transitions", autonomy_api.TransitionListApi.as_view(), name="transition-list"),
    path("autonomy/transitions/<int:pk>/approve", autonomy_api.TransitionApproveApi.as_view(), name="transition-approve"),
    path("autonomy/transitions/<int:pk>/reject", autonomy_api.TransitionRejectApi.as_view(), name="transition-reject"),
]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("console/", include("feedback.console")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="redoc"),
    path("api/v1/", include(api_v1)),
]

handler400 = "config.views.bad_request"
handler404 = "config.views.not_found"
handler500 = "config.views.server_error"
