from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Gavel console"

    def ready(self):
        # Socket hygiene: sign-out and deactivation close the user's sockets (receivers there);
        # every sign-in records its time in the session (console.signin's receiver).
        from console import checks, realtime, signin  # noqa: F401
