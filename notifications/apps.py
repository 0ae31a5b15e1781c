from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"

    def ready(self):
        from console.core import outbox
        from notifications import calls, mail, slack_responses

        # Mail is the sweep's alone (console/outbox.py): never a server process's work. The
        # call sender before the mail sender: a batch or a digest it turns into mail is sent in
        # the same round.
        outbox.register(
            outbox.Sender(
                name="call mail",
                run_due=calls.calls_run_due,
                next_due=calls.calls_next_due,
                sweep_only=True,
            )
        )
        outbox.register_mail(mail.email_queue)  # the platform's mail (resets, SSO domains)
        outbox.register(
            outbox.Sender(
                name="emails",
                run_due=mail.emails_run_due,
                next_due=mail.email_next_due,
                sweep_only=True,
            )
        )
        outbox.register(
            outbox.Sender(
                name=slack_responses.SENDER,
                run_due=slack_responses.slack_responses_run_due,
                next_due=slack_responses.slack_response_next_due,
                claim=slack_responses.slack_responses_claim,
            )
        )
