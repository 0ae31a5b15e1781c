"""`POST /integrations/slack/actions`: Slack's button presses. Only translates the request
(raw body, Slack's headers) into the service and its answer into JSON."""

from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from notifications.slack_actions import slack_action


@csrf_exempt  # Slack signs the request instead (verified before anything is read or done)
@require_POST
def slack_actions(request):
    answer = slack_action(
        body=request.body,
        timestamp=request.headers.get("X-Slack-Request-Timestamp"),
        signature=request.headers.get("X-Slack-Signature"),
    )
    return JsonResponse(answer.body, status=answer.status)
