from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from autonomy import api as autonomy_api
from feedback import api as feedback_api
from learning import api as learning_api
from memories import api as memories_api
from privacy import admin as privacy_admin
from privacy import api as privacy_api
from review import admin as review_admin
from review import api as review_api

# Resolve, and what users say about resolutions (they teach the user's phrases).
api_v1 = [
    path("resolve", learning_api.ResolveApi.as_view(), name="resolve"),
    path("disambiguations/<str:request_id>/select", learning_api.DisambiguationSelectApi.as_view(), name="disambiguation-select"),
    path(
        "disambiguations/<str:request_id>/abandon", learning_api.DisambiguationAbandonApi.as_view(), name="disambiguation-abandon"
    ),
    path("resolutions/correct", learning_api.ResolutionCorrectApi.as_view(), name="resolution-correct"),
    path("resolutions/confirm", learning_api.ResolutionConfirmApi.as_view(), name="resolution-confirm"),
    path("aliases/resolve", learning_api.AliasResolveApi.as_view(), name="alias-resolve"),
]

# Governance of what is learned.
api_v1 += [
    path("learning/candidates", learning_api.CandidateListApi.as_view(), name="candidate-list"),
    path("learning/candidates/<int:candidate_id>/approve", review_api.CandidateApproveApi.as_view(), name="candidate-approve"),
    path("learning/candidates/<int:candidate_id>/reject", review_api.CandidateRejectApi.as_view(), name="candidate-reject"),
    path("learning/stats", learning_api.LearningStatsApi.as_view(), name="learning-stats"),
    path("learning/import", learning_api.PhraseImportApi.as_view(), name="learning-import"),
    path("learning/imports/<int:job_id>", learning_api.PhraseImportJobApi.as_view(), name="learning-import-job"),
    path("blocklist", learning_api.BlockCreateApi.as_view(), name="blocklist-create"),
    path("blocklist/<int:block_id>", learning_api.BlockDetailApi.as_view(), name="blocklist-detail"),
    path("blocklist/<int:block_id>/expire", learning_api.BlockExpireApi.as_view(), name="blocklist-expire"),
]

# Memories.
api_v1 += [
    path("memories/observe", memories_api.MemoryObserveApi.as_view(), name="memory-observe"),
    path("memories/retrieve", memories_api.MemoryRetrieveApi.as_view(), name="memory-retrieve"),
    path("memories/outcome", memories_api.MemoryOutcomeApi.as_view(), name="memory-outcome"),
    path("memories/search", memories_api.MemorySearchApi.as_view(), name="memory-search"),
    # A data subject's request: everything stored about one user (reviewer token).
    path("users/erase", privacy_api.UserEraseApi.as_view(), name="user-erase"),
]

# Agent actions and their outcomes, feedback records, mistake patterns.
api_v1 += [
    path("proposals", feedback_api.ProposalListCreateApi.as_view(), name="proposal-list"),
    path("proposals/<int:pk>", feedback_api.ProposalDetailApi.as_view(), name="proposal-detail"),
    path("proposals/<int:pk>/approve", review_api.ProposalApproveApi.as_view(), name="proposal-approve"),
    path("proposals/<int:pk>/reject", review_api.ProposalRejectApi.as_view(), name="proposal-reject"),
    path("proposals/<int:pk>/modify", review_api.ProposalModifyApi.as_view(), name="proposal-modify"),
    path("executions", feedback_api.ExecutionListCreateApi.as_view(), name="execution-list"),
    path("executions/<int:pk>", feedback_api.ExecutionDetailApi.as_view(), name="execution-detail"),
    path("executions/<int:pk>/review", review_api.ExecutionReviewApi.as_view(), name="execution-review"),
    path("outcomes", feedback_api.OutcomeApi.as_view(), name="outcome-report"),
    path("overrides", feedback_api.OverrideApi.as_view(), name="override-create"),
    path("feedback-records", feedback_api.FeedbackRecordListApi.as_view(), name="feedback-record-list"),
    path("mistake-patterns", feedback_api.MistakePatternListApi.as_view(), name="mistake-pattern-list"),
]

# The action catalogue, consult before acting, autonomy transitions.
api_v1 += [
    path("actions", autonomy_api.ActionListApi.as_view(), name="action-list"),
    path("actions/<str:name>/consult", autonomy_api.ActionConsultApi.as_view(), name="action-consult"),
    path("actions/<str:name>/stop", autonomy_api.ActionStopApi.as_view(), name="action-stop"),
    path("autonomy/transitions", autonomy_api.TransitionListApi.as_view(), name="transition-list"),
    path("autonomy/transitions/<int:pk>/approve", review_api.TransitionApproveApi.as_view(), name="transition-approve"),
    path("autonomy/transitions/<int:pk>/reject", review_api.TransitionRejectApi.as_view(), name="transition-reject"),
]

urlpatterns = [
    path("admin/inbox/", admin.site.admin_view(review_admin.inbox_view), name="review-inbox"),
    path("admin/inbox/<str:kind>/<int:pk>/", admin.site.admin_view(review_admin.decide_view), name="review-decide"),
    path("admin/revert/<str:kind>/<int:pk>/", admin.site.admin_view(review_admin.revert_view), name="review-revert"),
    path("admin/users/erase/", admin.site.admin_view(privacy_admin.erase_view), name="privacy-erase"),
    path("admin/", admin.site.urls),
    path("console/", include("learning.console")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="redoc"),
    path("api/v1/", include(api_v1)),
]

handler400 = "config.views.bad_request"
handler404 = "config.views.not_found"
handler500 = "config.views.server_error"
