from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"

    def ready(self):
        from console import outbox
        from notifications import mail

        outbox.register(
            outbox.Sender(name="emails", run_due=mail.emails_run_due, next_due=mail.email_next_due)
        )
