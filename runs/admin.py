from django.contrib import admin

from runs import models

admin.site.register(
    [
        models.Agent,
        models.AgentVersion,
        models.Conversation,
        models.Run,
        models.Step,
        models.Message,
        models.ToolResult,
        models.Handoff,
        models.Verdict,
        models.RunEvent,
        models.UsageDaily,
    ]
)
