from django.urls import path

from benchmarks.network import buyer_api, host_api
from benchmarks.public import views as public_views

urlpatterns = [
    # Host calls (host token).
    path("v1/hosts/heartbeat", host_api.heartbeat, name="host-heartbeat"),
    path("v1/hosts/lease", host_api.LeaseView.as_view(), name="host-lease"),
    path("v1/jobs/complete", host_api.JobCompleteManyView.as_view(), name="job-complete-many"),
    path("v1/jobs/<uuid:job_id>/start", host_api.JobStartView.as_view(), name="job-start"),
    path("v1/jobs/<uuid:job_id>/complete", host_api.JobCompleteView.as_view(), name="job-complete"),
    path("v1/jobs/<uuid:job_id>/fail", host_api.JobFailView.as_view(), name="job-fail"),
    # Buyer calls (team token or session).
    path("v1/jobs", buyer_api.JobViewSet.as_view({"post": "create"}), name="job-submit"),
    path("v1/jobs/batch", buyer_api.JobViewSet.as_view({"post": "submit_batch"}), name="job-submit-batch"),
    path("v1/jobs/<uuid:job_id>", buyer_api.JobViewSet.as_view({"get": "retrieve"}), name="job-detail"),
    # Public benchmarks (no auth, shared-cache friendly; benchmarks/public/views.py).
    path("v1/slo", public_views.slo, name="public-slo"),
    path("v1/stats", public_views.stats, name="public-stats"),
    path("benchmarks", public_views.benchmarks_page, name="benchmarks"),
    path("benchmarks/methodology", public_views.methodology_page, name="benchmarks-methodology"),
]
