from django.urls import path

from approvals import views

app_name = "approvals"

urlpatterns = [
    path("approvals/", views.inbox, name="inbox"),
    path("approvals/<str:approval_id>/", views.card, name="card"),
    path("approvals/<str:approval_id>/decision/", views.decide, name="decide"),
    path("approvals/<str:approval_id>/extend/", views.extend, name="extend"),
    path(
        "approvals/runs/<str:run_id>/steps/<int:step>/decision/",
        views.decide_step,
        name="decide-step",
    ),
]
