from django.urls import path

from approvals import views, views_desk, views_rules

app_name = "approvals"

urlpatterns = [
    path("approvals/", views_desk.desk, name="inbox"),
    path("approvals/stats/", views_rules.decision_stats, name="stats"),
    path("approvals/views/", views_desk.saved_view_new, name="saved-view-new"),
    path("approvals/views/<str:view_id>/", views_desk.saved_view_edit, name="saved-view-edit"),
    path(
        "approvals/views/<str:view_id>/delete/",
        views_desk.saved_view_remove,
        name="saved-view-delete",
    ),
    path("approvals/<str:approval_id>/", views.card, name="card"),
    path("approvals/<str:approval_id>/decision/", views.decide, name="decide"),
    path("approvals/<str:approval_id>/extend/", views.extend, name="extend"),
    path(
        "approvals/runs/<str:run_id>/steps/<int:step>/decision/",
        views.decide_step,
        name="decide-step",
    ),
    path("rules/", views_rules.rules_index, name="rules"),
    path("rules/new/", views_rules.rule_new, name="rule-new"),
    path("rules/preview/", views_rules.rule_preview, name="rule-preview"),
    path("rules/suggestions/", views_rules.rule_from_suggestion, name="rule-from-suggestion"),
    path("rules/<str:rule_id>/", views_rules.rule_edit, name="rule-edit"),
    path(
        "rules/<str:rule_id>/deactivate/",
        views_rules.rule_deactivate_view,
        name="rule-deactivate",
    ),
]
