"""WebSocket addresses (console/asgi.py mounts them behind the origin check and the session)."""

from django.urls import path

from approvals.consumers import InboxConsumer
from budgets.consumers import BudgetsConsumer
from runs.consumers import RunConsumer, RunListConsumer

websocket_urlpatterns = [
    path("ws/runs/", RunListConsumer.as_asgi()),
    path("ws/runs/<str:run_id>/", RunConsumer.as_asgi()),
    path("ws/inbox/", InboxConsumer.as_asgi()),
    path("ws/budgets/", BudgetsConsumer.as_asgi()),
    path("ws/budgets/<str:budget_id>/", BudgetsConsumer.as_asgi()),
]
