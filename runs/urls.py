from django.urls import path

from runs import views

app_name = "runs"

urlpatterns = [
    path("runs/", views.run_list, name="list"),
    path("runs/<str:run_id>/", views.run_detail, name="detail"),
    path("runs/<str:run_id>/row/", views.run_row, name="row"),
    path("runs/<str:run_id>/partials/step/<int:number>/", views.run_step, name="step"),
    path("runs/<str:run_id>/partials/<slug:name>/", views.run_partial, name="partial"),
]
