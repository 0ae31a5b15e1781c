from django.urls import path

from notifications import views, views_slack

app_name = "notifications"

urlpatterns = [
    path("notifications/", views.notifications_page, name="list"),
    path("settings/", views.settings_page, name="settings"),
    path("integrations/slack/actions", views_slack.slack_actions, name="slack-actions"),
    path("notifications/read-all/", views.notifications_read_all, name="read-all"),
    path("notifications/<str:notification_id>/read/", views.notification_read, name="read"),
]
