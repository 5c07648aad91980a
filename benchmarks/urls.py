from django.urls import path

from benchmarks import api, public_views

urlpatterns = [
    # Host calls (host token).
    path("v1/hosts/heartbeat", api.heartbeat, name="host-heartbeat"),
    path("v1/hosts/lease", api.LeaseView.as_view(), name="host-lease"),
    path("v1/jobs/complete", api.JobCompleteManyView.as_view(), name="job-complete-many"),
    path("v1/jobs/<uuid:job_id>/start", api.JobStartView.as_view(), name="job-start"),
    path("v1/jobs/<uuid:job_id>/complete", api.JobCompleteView.as_view(), name="job-complete"),
    path("v1/jobs/<uuid:job_id>/fail", api.JobFailView.as_view(), name="job-fail"),
    # Buyer calls (team token or session).
    path("v1/jobs", api.JobViewSet.as_view({"post": "create"}), name="job-submit"),
    path("v1/jobs/batch", api.JobViewSet.as_view({"post": "submit_batch"}), name="job-submit-batch"),
    path("v1/jobs/<uuid:job_id>", api.JobViewSet.as_view({"get": "retrieve"}), name="job-detail"),
    # Public benchmarks (no auth, shared-cache friendly; benchmarks/public_views.py).
    path("v1/slo", public_views.slo, name="public-slo"),
    path("v1/stats", public_views.stats, name="public-stats"),
    path("benchmarks", public_views.benchmarks_page, name="benchmarks"),
    path("benchmarks/methodology", public_views.methodology_page, name="benchmarks-methodology"),
]
