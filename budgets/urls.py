from django.urls import path

from budgets import views

app_name = "budgets"

urlpatterns = [
    path("budgets/", views.index, name="index"),
    path("budgets/new/", views.create, name="create"),
    path("budgets/usage.csv", views.usage_csv, name="usage-csv"),
    path("budgets/partials/<slug:name>/", views.index_partial, name="partial"),
    path("budgets/<str:budget_id>/", views.detail, name="detail"),
    path("budgets/<str:budget_id>/edit/", views.edit, name="edit"),
    path("budgets/<str:budget_id>/delete/", views.archive, name="delete"),
    path("budgets/<str:budget_id>/burn.csv", views.burn_csv, name="burn-csv"),
    path(
        "budgets/<str:budget_id>/partials/<slug:name>/",
        views.detail_partial,
        name="detail-partial",
    ),
]
